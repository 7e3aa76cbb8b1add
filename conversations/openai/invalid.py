"""The API's request errors: an InvalidInput naming the field in ``param``
(OpenAI's error shape), and the check that refuses text JSON could not carry.
Shared by the parsers of chat completions, their parameters and tools, and
embeddings."""

from __future__ import annotations

from chatsite.errors import DomainError, InvalidInput

UNSUPPORTED = "unsupported_parameter"
INVALID = "invalid_parameter"


def with_param(exc: DomainError, param: str | None) -> DomainError:
    """Name the request field ``exc`` is about (OpenAI's ``error.param``)."""
    exc.param = param
    return exc


def invalid_input(
    message: str, code: str = "invalid_request", *, param: str | None = None
) -> DomainError:
    """Return an InvalidInput (400) about the request field ``param`` (None: the body)."""
    return with_param(InvalidInput(message, code=code), param)


def unsupported(name: str, why: str) -> DomainError:
    """Return the 400 ``unsupported_parameter`` refusing the field ``name``."""
    return invalid_input(
        f"`{name}` is not supported: {why}. Remove it from the request.",
        UNSUPPORTED,
        param=name,
    )


def unicode_check(text: str, where: str, *, param: str) -> None:
    """Raise InvalidInput if ``text`` holds an unpaired UTF-16 surrogate.

    JSON may escape one (``"\\ud800"``) and Python decodes it into a str that UTF-8
    cannot encode: the job (Redis), the cache key and the response would all fail on
    it (a 500).
    """
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise invalid_input(
            f"{where} contains an unpaired UTF-16 surrogate (\\ud800-\\udfff); send "
            "valid Unicode text.",
            "invalid_character",
            param=param,
        ) from exc

"""Parse and validate ``/v1/embeddings`` bodies (pure: no I/O).

Errors are :class:`~chatsite.errors.InvalidInput` (400) naming the field in the message
and as ``param`` (:func:`conversations.openai.requests.invalid_input`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from conversations.openai.invalid import invalid_input, unicode_check, unsupported
from conversations.openai.requests import json_object

ENCODING_FORMATS = ("float", "base64")
# The body's fields (OpenAI's embeddings request); any other is refused by name.
FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})


@dataclass
class EmbeddingRequest:
    """A validated ``/v1/embeddings`` body.

    ``texts``: the inputs, one string per vector wanted (a single string becomes a
    list of one); ``encoding_format``: ``float`` (lists of numbers) or ``base64``
    (each vector as the base64 of its little-endian float32 values, what the official
    client asks for by default); ``dimensions``: the vector length asked for (None:
    the model's own); ``user``: the caller's end-user id (accepted, not used).
    """

    model: str
    texts: list[str]
    encoding_format: str = "float"
    dimensions: int | None = None
    user: str | None = None


def _is_token_ids(value: Any) -> bool:
    """True for OpenAI's token-id input: a list of ints, or a list of such lists."""
    if not isinstance(value, list) or not value:
        return False
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return True
    return all(
        isinstance(row, list)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in row)
        for row in value
    )


def _embedding_input(raw: Any) -> list[str]:
    """Return the texts of ``input``; raise InvalidInput (param ``input``).

    Limits: at most API_EMBEDDING_MAX_INPUTS texts, each non-empty and at most
    API_EMBEDDING_MAX_INPUT_CHARS characters, API_EMBEDDING_MAX_TOTAL_CHARS in all.
    Token ids are refused: a pool's tokenizer is its worker's business.
    """
    if raw is None:
        raise invalid_input(
            "`input` is required: a string, or a list of strings.",
            "missing_input",
            param="input",
        )
    if _is_token_ids(raw):
        raise invalid_input(
            "`input` as token ids is not supported: send the text itself (a string "
            "or a list of strings).",
            "unsupported_input",
            param="input",
        )
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise invalid_input(
            "`input` must be a string or a list of strings.",
            "invalid_input",
            param="input",
        )
    if not texts:
        raise invalid_input(
            "`input` must not be an empty list.", "invalid_input", param="input"
        )
    most = settings.API_EMBEDDING_MAX_INPUTS
    if len(texts) > most:
        raise invalid_input(
            f"`input` holds {len(texts):,} texts; the limit is {most:,} per request.",
            "too_many_inputs",
            param="input",
        )
    longest = settings.API_EMBEDDING_MAX_INPUT_CHARS
    for i, text in enumerate(texts):
        where = "`input`" if isinstance(raw, str) else f"input[{i}]"
        if not text:
            raise invalid_input(
                f"{where} is an empty string.", "invalid_input", param="input"
            )
        if len(text) > longest:
            raise invalid_input(
                f"{where} holds {len(text):,} characters; the limit is {longest:,}.",
                "input_too_long",
                param="input",
            )
        unicode_check(text, where, param="input")
    total = sum(len(t) for t in texts)
    if total > settings.API_EMBEDDING_MAX_TOTAL_CHARS:
        raise invalid_input(
            f"`input` holds {total:,} characters in all; the limit is "
            f"{settings.API_EMBEDDING_MAX_TOTAL_CHARS:,} per request.",
            "input_too_long",
            param="input",
        )
    return texts


def embedding_request_parse(body: bytes) -> EmbeddingRequest:
    """Validate a ``/v1/embeddings`` JSON body (UTF-8 bytes).

    Raises InvalidInput (400) naming the field in the message and in ``param``; a
    field other than :data:`FIELDS` is ``unsupported_parameter``. Whether
    ``dimensions`` fits the model is the gateway's to say (it depends on the pool).
    """
    data = json_object(body)
    for name, value in data.items():
        if name not in FIELDS and value is not None:
            raise unsupported(name, "this API does not know this field")
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise invalid_input(
            "`model` is required (see GET /v1/models for embedding models).",
            "missing_model",
            param="model",
        )
    encoding_format = data.get("encoding_format")
    if encoding_format is None:
        encoding_format = "float"
    if encoding_format not in ENCODING_FORMATS:
        raise invalid_input(
            '`encoding_format` must be "float" or "base64".',
            "invalid_parameter",
            param="encoding_format",
        )
    dimensions = data.get("dimensions")
    if dimensions is not None and (
        isinstance(dimensions, bool)
        or not isinstance(dimensions, int)
        or dimensions < 1
    ):
        raise invalid_input(
            "`dimensions` must be a positive integer.",
            "invalid_parameter",
            param="dimensions",
        )
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid_input(
            "`user` must be a string.", "invalid_parameter", param="user"
        )
    return EmbeddingRequest(
        model=model.strip(),
        texts=_embedding_input(data.get("input")),
        encoding_format=encoding_format,
        dimensions=dimensions,
        user=user,
    )

"""What a request's parameters must fit before admission reserves anything: the routed
pool's engine (:data:`inference.params.ENGINE_PARAMS`), its output limit and its
context window. Raised as 400s (:mod:`chatsite.errors`)."""

from __future__ import annotations

from typing import Any

from chatsite.errors import InvalidInput
from gateway.models import ModelPool
from inference.params import TOOLS, params_unsupported


class ContextOverflow(InvalidInput):
    """The prompt alone fills the model's context window (400): no answer could fit.

    Raised at admission, before anything is reserved or enqueued, so a streamed and a
    whole answer fail alike and at once (not after a queue wait, from the engine).
    """

    code = "context_overflow"
    param = "messages"

    @classmethod
    def for_prompt(cls, *, prompt_tokens: int, window: int) -> ContextOverflow:
        """Return the error for a prompt of ``prompt_tokens`` tokens over ``window``."""
        return cls(
            f"The conversation is about {prompt_tokens:,} tokens long, but the model "
            f"reads at most {window:,} tokens at once. Shorten the message (or start "
            "a new conversation) and send it again."
        )


class UnsupportedParameter(InvalidInput):
    """A parameter the routed pool's engine does not implement, or a value over the
    model's limit (400; ``param`` names the field; the table:
    :data:`inference.params.ENGINE_PARAMS`)."""

    code = "unsupported_parameter"


def tools_fit(*, pool: ModelPool, params: dict[str, Any], optional: bool) -> None:
    """Drop the tool parameters from ``params`` (in place) when they are an offer
    (``optional``, :attr:`GenerationRequest.tools_optional`) the engine of ``pool``
    does not implement; otherwise leave them for :func:`params_check`."""
    if optional and params_unsupported(
        engine=pool.engine, params=[k for k in params if k in TOOLS]
    ):
        for name in TOOLS:
            params.pop(name, None)


def params_check(
    *, pool: ModelPool, params: dict[str, Any], strict: bool, context_tokens: int = 0
) -> None:
    """Refuse ``params`` the engine of ``pool`` cannot honour (before any reservation).

    ``strict`` (``GenerationRequest.max_tokens_strict``): a ``max_tokens``
    above the pool's ``max_output_tokens`` is refused rather than lowered to it, and
    so is one that does not fit the window after the prompt's ``context_tokens``.
    Raises UnsupportedParameter (400) naming the first such field, ContextOverflow
    (400) for the window.
    """
    for name in params_unsupported(engine=pool.engine, params=params):
        exc = UnsupportedParameter(
            f"`{name}` is not supported by the model “{pool.name}” (its engine, "
            f"{pool.engine}, does not implement it). Remove it from the request; "
            "docs/api.md lists what each engine supports."
        )
        exc.param = name
        raise exc
    asked = params.get("max_tokens")
    if strict and asked is not None and asked > pool.max_output_tokens:
        exc = UnsupportedParameter(
            f"`max_tokens` is {asked:,}; the model “{pool.name}” writes at most "
            f"{pool.max_output_tokens:,} tokens per answer.",
            code="invalid_parameter",
        )
        exc.param = "max_tokens"
        raise exc
    if strict and asked is not None and context_tokens + asked > pool.max_context:
        raise ContextOverflow(  # OpenAI's and vLLM's context_length_exceeded wording
            f"This model's maximum context length is {pool.max_context:,} tokens. "
            f"However, you requested {context_tokens + asked:,} tokens "
            f"({context_tokens:,} in the messages, {asked:,} in the completion). "
            "Reduce the length of the messages or of max_tokens."
        )

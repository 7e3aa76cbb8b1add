"""A generation's outcome, as every surface stores, shows and bills it.

Every surface (the chat's answer, the OpenAI-compatible API, the reaper) reads how a
generation ended from :func:`outcome_from_events`, so the stored status, the finish
reason shown to a client and the tokens billed never differ between surfaces. The
events are read by :func:`inference.jobs.events_fold` and mapped by its one
finish-reason map (:data:`inference.jobs.FINISH_MAP`: status and OpenAI finish
reason), as background generations are.

Billed: a ``done`` event's usage; an answer that failed midway (its worker killed,
the engine failing) what was generated for it (:func:`inference.jobs.usage_spent`:
the prompt tokens the ``error`` event reports plus one completion token per ``token``
event); an error before any token, fallback restarts included, nothing: no answer
reached anyone. A cache hit reports the usage of the generation that wrote its answer
(its whole prompt cached: :func:`gateway.cache.cache_serve`) and bills 0 (no engine
processed a token: :func:`gateway.generations.settle.usage_settle`). Statuses are :class:`gateway.models.UsageRecord.Status` values; the chat's
``Message.Status`` uses the same strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from chatsite.errors import DomainError
from gateway.models import UsageRecord
from inference import jobs, protocol
from inference.params import ERROR_INVALID_PARAMETER

# HTTP status of a failed generation, by its error code (default 500); the retryable
# ones can succeed when sent again (capacity came back).
_FAILED_STATUS = {
    protocol.ERROR_QUEUE_TIMEOUT: 503,
    protocol.ERROR_NO_WORKER: 503,
    protocol.ERROR_CONTEXT_OVERFLOW: 400,
    ERROR_INVALID_PARAMETER: 400,
}
DEFAULT_FAILURE_MESSAGE = "The model failed while answering. Please try again."


class GenerationFailed(DomainError):
    """The generation ended with an ``error`` event (status and retryability by code)."""

    status = 500
    code = protocol.ERROR_ENGINE
    message = DEFAULT_FAILURE_MESSAGE


# request fields an engine's ``invalid_parameter`` message may start with ("tools: …")
_PARAM_PREFIXES = ("tools", "tool_choice", "response_format", "logit_bias")


def generation_failed(*, code: str, message: str = "") -> GenerationFailed:
    """Return the error a surface shows for an ``error`` event with ``code``. An
    ``invalid_parameter`` message that starts with a request field and a colon
    ("tools: …", the engines' convention) names that field as the error's ``param``
    (OpenAI's ``error.param``)."""
    status = _FAILED_STATUS.get(code, 500)
    retryable = status == 503
    failed = GenerationFailed(
        message or DEFAULT_FAILURE_MESSAGE,
        code=code or protocol.ERROR_ENGINE,
        status=status,
        retryable=retryable,
        retry_after_s=settings.GATEWAY_SATURATED_RETRY_AFTER_S if retryable else None,
    )
    field = message.split(":", 1)[0] if ":" in message else ""
    if code == ERROR_INVALID_PARAMETER and field in _PARAM_PREFIXES:
        failed.param = field
    return failed


@dataclass
class Outcome:
    """How a generation ended, as every surface stores and shows it.

    ``text`` is the answer as released to clients (characters); ``usage`` the tokens
    reported to the client and billed (zero for errors before the first token; a cache
    hit reports its original generation's and bills zero, see the module's docstring); ``ttft_ms``/``latency_ms`` from the
    worker's ``done`` event (None on error); ``error`` set iff ``status`` is error;
    ``reason`` the sentence a user reads about why a ``filtered`` answer was cut.
    ``tool_calls``: the calls the model made (finish ``tool_calls``), OpenAI's shape
    ``[{"id": "call_…", "type": "function", "function": {"name", "arguments"}}]``
    (arguments: the JSON string exactly as generated); [] for a plain answer and for
    an answer cut by output moderation. A service running a tool loop reads them here.
    """

    status: str
    finish_reason: str
    text: str = ""
    usage: protocol.Usage = field(default_factory=protocol.Usage)
    model: str = ""
    cache_kind: str = ""
    ttft_ms: int | None = None
    latency_ms: int | None = None
    error: GenerationFailed | None = None
    reason: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def openai_finish_reason(self) -> str | None:
        """OpenAI's ``finish_reason`` (None for an error: the API sends an error)."""
        if self.error is not None:
            return None
        return jobs.FINISH_MAP[self.finish_reason][1]


def outcome_from_events(
    events: list[protocol.Event], *, model: str = "", cache_kind: str = ""
) -> Outcome:
    """Return the outcome of a generation from its events, ending with the terminal one.

    ``model`` is used when no ``meta`` event names one; ``cache_kind`` when the
    ``meta`` event does not say the answer came from a cache. Raises ValueError when
    the last event is not terminal.
    """
    if not events or not events[-1].is_terminal:
        raise ValueError("the generation has not ended")
    end = jobs.events_fold(events)
    cache_kind = end.meta.get("cache") or cache_kind
    error = None
    if end.error_code:
        error = generation_failed(code=end.error_code, message=end.error_message)
    return Outcome(
        status=UsageRecord.Status(end.status),
        finish_reason=end.finish_reason,
        text=end.text,
        usage=end.usage,
        model=end.meta.get("model") or model,
        cache_kind=cache_kind,
        ttft_ms=end.ttft_ms,
        latency_ms=end.latency_ms,
        error=error,
        tool_calls=end.tool_calls if error is None else [],
    )


def outcome_filtered(outcome: Outcome, *, released: str, reason: str = "") -> Outcome:
    """Return ``outcome`` cut by a stream policy: only ``released`` text was shown.

    The engine's usage is still billed (it generated those tokens: a cut cancels the
    engine, so that is what it wrote up to the cancel); an error keeps being an error.
    ``reason``: the policy's sentence for the user ("" : the generic one).
    """
    if outcome.error is not None:
        return outcome
    return Outcome(
        status=UsageRecord.Status.FILTERED,
        finish_reason=protocol.FINISH_CONTENT_FILTER,
        text=released,
        usage=outcome.usage,
        model=outcome.model,
        cache_kind=outcome.cache_kind,
        ttft_ms=outcome.ttft_ms,
        latency_ms=outcome.latency_ms,
        reason=reason,
    )

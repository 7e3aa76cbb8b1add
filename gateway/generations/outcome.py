"""The one map from a generation's terminal event to its outcome.

Every surface (the chat's answer, the OpenAI-compatible API, the reaper) reads how a
generation ended from :func:`outcome_from_events`, so the stored status, the finish
reason shown to a client and the tokens billed never differ between surfaces.

| terminal event                    | status      | finish_reason  | OpenAI finish  | billed |
|-----------------------------------|-------------|----------------|----------------|--------|
| ``done`` finish ``stop``          | complete    | stop           | stop           | usage  |
| ``done`` finish ``length``        | complete    | length         | length         | usage  |
| ``done`` finish ``cancelled``     | cancelled   | cancelled      | stop           | usage  |
| ``done`` finish ``content_filter``| filtered    | content_filter | content_filter | usage  |
| ``error`` before the first token  | error       | error          | — (an error)   | 0      |
| ``error`` after tokens            | error       | error          | — (an error)   | spent  |

"spent" (:func:`error_usage`): an answer that failed midway (its worker killed, the
engine failing) is billed what was generated for it, as a stopped answer is: the
prompt tokens the worker reported in the ``error`` event's ``usage`` (0 when none did,
e.g. the web tier's watchdog ended it) plus one completion token per ``token`` event on
the stream (each is one engine delta: the text the user received). An error before any
token, fallback restarts included, bills nothing: no answer reached anyone.
A cache hit bills 0 whatever its event says (no engine processed a token). Statuses
are :class:`gateway.models.UsageRecord.Status` values; the chat's
``Message.Status`` uses the same strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings

from chatsite.errors import DomainError
from gateway.models import UsageRecord
from inference import protocol

# status and OpenAI finish reason, by the worker's finish reason
_BY_FINISH = {
    protocol.FINISH_STOP: (UsageRecord.Status.COMPLETE, "stop"),
    protocol.FINISH_LENGTH: (UsageRecord.Status.COMPLETE, "length"),
    protocol.FINISH_CANCELLED: (UsageRecord.Status.CANCELLED, "stop"),
    protocol.FINISH_CONTENT_FILTER: (UsageRecord.Status.FILTERED, "content_filter"),
}
FINISH_ERROR = "error"

# HTTP status of a failed generation, by its error code (default 500); the retryable
# ones can succeed when sent again (capacity came back).
_FAILED_STATUS = {
    protocol.ERROR_QUEUE_TIMEOUT: 503,
    protocol.ERROR_NO_WORKER: 503,
    protocol.ERROR_CONTEXT_OVERFLOW: 400,
}
DEFAULT_FAILURE_MESSAGE = "The model failed while answering. Please try again."


class GenerationFailed(DomainError):
    """The generation ended with an ``error`` event (status and retryability by code)."""

    status = 500
    code = protocol.ERROR_ENGINE
    message = DEFAULT_FAILURE_MESSAGE


def generation_failed(*, code: str, message: str = "") -> GenerationFailed:
    """Return the error a surface shows for an ``error`` event with ``code``."""
    status = _FAILED_STATUS.get(code, 500)
    retryable = status == 503
    return GenerationFailed(
        message or DEFAULT_FAILURE_MESSAGE,
        code=code or protocol.ERROR_ENGINE,
        status=status,
        retryable=retryable,
        retry_after_s=settings.GATEWAY_SATURATED_RETRY_AFTER_S if retryable else None,
    )


@dataclass
class Outcome:
    """How a generation ended, as every surface stores and shows it.

    ``text`` is the answer as released to clients (characters); ``usage`` the tokens
    billed (zero for cache hits and errors before the first token, see the module's
    table); ``ttft_ms``/``latency_ms`` from the
    worker's ``done`` event (None on error); ``error`` set iff ``status`` is error;
    ``reason`` the sentence a user reads about why a ``filtered`` answer was cut.
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

    @property
    def openai_finish_reason(self) -> str | None:
        """OpenAI's ``finish_reason`` (None for an error: the API sends an error)."""
        if self.error is not None:
            return None
        return _BY_FINISH[self.finish_reason][1]


def error_usage(events: list[protocol.Event]) -> protocol.Usage:
    """Return what a generation that ended with an ``error`` (the last of ``events``)
    bills: nothing before its first ``token`` event; after it, the prompt (and cached)
    tokens of the error's ``usage`` (0 if it has none) plus one completion token per
    ``token`` event (see the module's table)."""
    streamed = sum(1 for e in events if e.type == protocol.EVENT_TOKEN)
    if not streamed:
        return protocol.Usage()
    reported = protocol.Usage.from_dict(events[-1].data.get("usage"))
    return protocol.Usage(
        prompt_tokens=reported.prompt_tokens,
        completion_tokens=streamed,
        cached_tokens=reported.cached_tokens,
    )


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
    terminal = events[-1]
    meta = next((e.data for e in events if e.type == protocol.EVENT_META), {})
    text = "".join(e.data["t"] for e in events if e.type == protocol.EVENT_TOKEN)
    cache_kind = meta.get("cache") or cache_kind
    model = meta.get("model") or model
    if terminal.type == protocol.EVENT_ERROR:
        return Outcome(
            status=UsageRecord.Status.ERROR,
            finish_reason=FINISH_ERROR,
            text=text,
            usage=protocol.Usage() if cache_kind else error_usage(events),
            model=model,
            cache_kind=cache_kind,
            error=generation_failed(
                code=terminal.data.get("code") or protocol.ERROR_ENGINE,
                message=terminal.data.get("message") or "",
            ),
        )
    finish = terminal.data["finish_reason"]
    usage = protocol.Usage.from_dict(terminal.data.get("usage"))
    return Outcome(
        status=_BY_FINISH[finish][0],
        finish_reason=finish,
        text=text,
        usage=protocol.Usage() if cache_kind else usage,
        model=model,
        cache_kind=cache_kind,
        ttft_ms=terminal.data.get("ttft_ms"),
        latency_ms=terminal.data.get("latency_ms"),
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

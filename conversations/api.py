"""The OpenAI-compatible API (DESIGN §8): ``POST /v1/chat/completions``, ``GET /v1/models``.

Bearer API keys (``Authorization: Bearer sk-...``, :func:`gateway.services.api_key_authenticate`);
no session, no CSRF. A request takes the same gateway path as a chat turn: routing,
token reservation and admission (:func:`gateway.services.generation_admit`) before
anything is enqueued (429 with ``Retry-After`` and ``x-ratelimit-*`` headers; 503 when
every pool that could answer is saturated), then :func:`gateway.services.generation_submit`.
The generation's Redis stream is relayed as ``chat.completion.chunk`` SSE lines
(``data: [DONE]`` at the end) or collected into one ``chat.completion``. Its usage is
settled exactly once (one :class:`gateway.models.UsageRecord`) when the terminal event
arrives; a client that disconnects cancels the job. API requests are not stored as
conversations.

Errors use OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from chatsite.db import db_brief
from chatsite.errors import DomainError, InvalidInput, NotFound, PayloadTooLarge
from gateway import selectors as gateway_selectors
from gateway import services as gateway
from gateway.models import UsageRecord
from inference import client as inference_client
from inference import protocol
from inference.tokens import prompt_counter

READ_BLOCK_MS = 1000
# Response header naming the cache that answered ("exact" / "semantic"); absent: a model.
CACHE_HEADER = "x-chatsite-cache"
# OpenAI roles accepted, and the role the engine sees
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
_FINISH = {
    protocol.FINISH_STOP: "stop",
    protocol.FINISH_LENGTH: "length",
    protocol.FINISH_CANCELLED: "stop",
    protocol.FINISH_CONTENT_FILTER: "content_filter",
}
_STATUS = {
    protocol.FINISH_STOP: UsageRecord.Status.COMPLETE,
    protocol.FINISH_LENGTH: UsageRecord.Status.COMPLETE,
    protocol.FINISH_CANCELLED: UsageRecord.Status.CANCELLED,
    protocol.FINISH_CONTENT_FILTER: UsageRecord.Status.FILTERED,
}
# HTTP status of a generation that failed (non-streaming answer), by error code.
_FAILED_STATUS = {
    protocol.ERROR_QUEUE_TIMEOUT: 503,
    protocol.ERROR_NO_WORKER: 503,
    protocol.ERROR_CONTEXT_OVERFLOW: 400,
}


class InvalidApiKey(DomainError):
    """A missing, unknown or revoked API key (401)."""

    status = 401
    code = "invalid_api_key"
    message = (
        "Incorrect or missing API key. Send `Authorization: Bearer sk-...` with a key "
        "from your settings page."
    )


class GenerationFailed(DomainError):
    """The generation ended with an error event (status by its code)."""

    status = 500
    code = protocol.ERROR_ENGINE


def _error_type(exc: DomainError) -> str:
    if exc.status == 429:
        return "tokens" if exc.code == "quota_minute" else "insufficient_quota"
    if exc.status >= 500:
        return "server_error"
    if exc.status == 403:
        return "permission_error"
    return "invalid_request_error"


def error_body(exc: DomainError) -> dict[str, Any]:
    """Return OpenAI's error object for ``exc``: ``{"error": {"message", "type", ...}}``."""
    return {
        "error": {
            "message": exc.message,
            "type": _error_type(exc),
            "param": None,
            "code": exc.code,
        }
    }


def api_error(exc: DomainError) -> JsonResponse:
    """Return ``exc`` as an OpenAI error response, with its status and headers.

    A 429 that can never succeed (the request alone is over the limit) carries
    ``x-should-retry: false`` so the official clients do not retry it.
    """
    response = JsonResponse(error_body(exc), status=exc.status)
    for name, value in exc.headers.items():
        response[name] = value
    if exc.status == 401:
        response["WWW-Authenticate"] = "Bearer"
    if exc.status == 429 and not exc.retryable:
        response["x-should-retry"] = "false"
    return response


@dataclass
class CompletionRequest:
    """A validated ``/v1/chat/completions`` body.

    ``messages`` are engine-ready (``developer`` folded into ``system``, content parts
    joined); ``params`` the sampling parameters given (``max_tokens`` in tokens).
    ``cache`` is our extension (``extra_body={"cache": true}`` in the openai client):
    true, the answer may come from this user's answer caches even at a temperature
    above 0; false, the caches are neither read nor filled (also at temperature 0).
    """

    model: str
    messages: list[dict[str, str]]
    params: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    include_usage: bool = False
    cache: bool | None = None  # True: opted in at any temperature; False: opted out


def _bad(message: str, code: str = "invalid_request") -> InvalidInput:
    return InvalidInput(message, code=code)


def _unicode_check(text: str, where: str) -> None:
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
        raise _bad(
            f"{where} contains an unpaired UTF-16 surrogate (\\ud800-\\udfff); send "
            "valid Unicode text.",
            "invalid_character",
        ) from exc


def _content_text(content: Any, index: int, role: str) -> str:
    if content is None and role == "assistant":
        return ""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise _bad(
                    f"messages[{index}].content: only text parts are supported "
                    '({"type": "text", "text": "..."}).',
                    "unsupported_content",
                )
            if not isinstance(part.get("text"), str):
                raise _bad(f"messages[{index}].content: a text part needs a string.")
            parts.append(part["text"])
        text = "".join(parts)
    else:
        raise _bad(
            f"messages[{index}].content must be a string or a list of text parts.",
            "invalid_content",
        )
    if "\x00" in text:
        raise _bad(
            f"messages[{index}].content contains a NUL character.", "invalid_character"
        )
    _unicode_check(text, f"messages[{index}].content")
    return text


def _messages(raw: Any) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise _bad(
            "`messages` must be a non-empty list of messages.", "invalid_messages"
        )
    messages: list[dict[str, str]] = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise _bad(f"messages[{i}] must be an object.", "invalid_messages")
        role = message.get("role")
        if role not in ROLES:
            raise _bad(
                f"messages[{i}].role {role!r} is not supported: use system, developer, "
                "user or assistant.",
                "invalid_role",
            )
        text = _content_text(message.get("content"), i, role)
        messages.append({"role": ROLES[role], "content": text})
    if not any(m["role"] == "user" and m["content"].strip() for m in messages):
        raise _bad("`messages` needs at least one non-empty user message.", "no_prompt")
    total = sum(len(m["content"]) for m in messages)
    if total > settings.API_MAX_PROMPT_CHARS:
        raise PayloadTooLarge(
            f"The messages hold {total:,} characters; the limit is "
            f"{settings.API_MAX_PROMPT_CHARS:,}.",
            code="prompt_too_long",
        )
    return messages


def _number(body: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(f"`{name}` must be a number.", "invalid_parameter")
    if not lo <= value <= hi:
        raise _bad(f"`{name}` must be between {lo:g} and {hi:g}.", "invalid_parameter")
    return float(value)


def _params(body: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _bad(f"`{name}` must be a positive integer.", "invalid_parameter")
        params.setdefault("max_tokens", value)
    temperature = _number(body, "temperature", 0, 2)
    if temperature is not None:
        params["temperature"] = temperature
    top_p = _number(body, "top_p", 0, 1)
    if top_p is not None:
        params["top_p"] = top_p
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if (
            not isinstance(stops, list)
            or len(stops) > 4
            or not all(isinstance(s, str) and s for s in stops)
        ):
            raise _bad(
                "`stop` must be a string or a list of up to 4 non-empty strings.",
                "invalid_parameter",
            )
        for stop_text in stops:
            _unicode_check(stop_text, "`stop`")
        if stops:
            params["stop"] = stops
    if body.get("n") not in (None, 1):
        raise _bad("Only `n` = 1 is supported.", "invalid_parameter")
    return params


def completion_request_parse(body: bytes) -> CompletionRequest:
    """Validate a ``/v1/chat/completions`` JSON body; raise InvalidInput (400) or
    PayloadTooLarge (413, over API_MAX_PROMPT_CHARS characters) naming the field."""
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad("The request body is not valid JSON.", "invalid_json") from exc
    if not isinstance(data, dict):
        raise _bad("The request body must be a JSON object.", "invalid_json")
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise _bad("`model` is required (see GET /v1/models).", "missing_model")
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("`stream` must be true or false.", "invalid_parameter")
    options = data.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise _bad(
                "`stream_options` is only allowed when `stream` is true.",
                "invalid_parameter",
            )
        if not isinstance(options, dict):
            raise _bad("`stream_options` must be an object.", "invalid_parameter")
        include_usage = options.get("include_usage", False)
        if not isinstance(include_usage, bool):
            raise _bad(
                "`stream_options.include_usage` must be true or false.",
                "invalid_parameter",
            )
    cache = data.get("cache")
    if cache is not None and not isinstance(cache, bool):
        raise _bad("`cache` must be true or false.", "invalid_parameter")
    return CompletionRequest(
        model=model.strip(),
        messages=_messages(data.get("messages")),
        params=_params(data),
        stream=stream,
        include_usage=include_usage,
        cache=cache,
    )


# --- authentication and admission (sync, run through sync_to_async) ------------------


def _bearer(request: HttpRequest) -> str:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    return raw.strip() if scheme.lower() == "bearer" else ""


def _api_user(request: HttpRequest) -> AbstractBaseUser:
    """Return the user of the request's API key; raise InvalidApiKey (401)."""
    user = gateway.api_key_authenticate(raw=_bearer(request))
    if user is None:
        raise InvalidApiKey()
    return user


def _model_check(model: str) -> None:
    """With no pool in the database only the default pool's name is a model."""
    if not gateway_selectors.gateway_config().pools and (
        model != settings.INFERENCE_DEFAULT_POOL
    ):
        raise NotFound(
            f"The model “{model}” does not exist or is not available.",
            code="model_not_found",
        )


@dataclass
class Started:
    """An admitted, enqueued API generation."""

    job_id: str
    user_id: int
    pool: str
    model: str
    enqueued_at: float
    created: int  # epoch seconds, the ``created`` of the completion
    cache_kind: str = ""  # "exact" / "semantic" when a cache answers, else ""


def prompt_tokens_reserve(messages: list[dict[str, str]]) -> int:
    """Return the prompt tokens to reserve for an API request.

    The count of the serving model's tokenizer and chat template (the one chat turns
    are built with, MEMORY_TOKENIZER_ENGINE; ~0.6 ms), never below the gateway's
    character estimate (a pool serving another model may tokenize differently).
    The template matters: SmolLM2's adds its own system prompt when a request has
    none, so "hi" is 31 prompt tokens where the estimate says 7.
    """
    count = prompt_counter(settings.MEMORY_TOKENIZER_ENGINE)(messages)
    return max(count, gateway.prompt_tokens_estimate(messages))


def _start(*, user: AbstractBaseUser, req: CompletionRequest) -> Started:
    """Admit (reserve tokens) and enqueue; nothing stays reserved if it raises.

    The answer caches (:mod:`gateway.cache`): at temperature 0 the exact cache (an
    identical request gets the identical answer); with ``cache`` true also at other
    temperatures, and then a single-turn prompt may use the semantic cache too (an API
    request carries no personal context: no memory is injected). The semantic cache is
    approximate and embedding the prompt costs ~13 ms of CPU, so temperature 0 alone
    does not use it. ``cache`` false: no cache at all. A hit is served by the gateway
    without a job.
    """
    _model_check(req.model)
    job_id = str(uuid.uuid4())
    with gateway.reservation_guard(job_id=job_id):
        admission = gateway.generation_admit(
            user=user,
            job_id=job_id,
            messages=req.messages,
            prompt_tokens=prompt_tokens_reserve(req.messages),
            params=req.params,
            model=req.model,
            cache_policy=None
            if req.cache is False
            else gateway.CachePolicy(
                single_turn=True,
                personal=False,
                opt_in=bool(req.cache),
                semantic=bool(req.cache),
            ),
        )
        submission = gateway.generation_submit(
            job_id=job_id,
            messages=req.messages,
            params=admission.params,
            user_ref=str(user.pk),
            pool=admission.pool,
            cache_hit=admission.cache_hit,
        )
    return Started(
        job_id=job_id,
        user_id=user.pk,
        pool=admission.pool,
        model=admission.model or req.model,
        enqueued_at=submission.enqueued_at,
        created=int(submission.enqueued_at),
        cache_kind=admission.cache_hit.kind if admission.cache_hit else "",
    )


def _authenticate_and_start(request: HttpRequest) -> tuple[Started, CompletionRequest]:
    """Authenticate, validate the body, admit and enqueue: one sync step (one thread
    hop, one pooled connection) for the whole admission path."""
    user = _api_user(request)
    req = completion_request_parse(request.body)
    return _start(user=user, req=req), req


# --- the generation: relay, settle once, cancel on disconnect ------------------------


@dataclass
class Outcome:
    """How a generation ended: ``finish_reason`` (OpenAI's) or an error."""

    finish_reason: str = ""
    usage: protocol.Usage = field(default_factory=protocol.Usage)
    model: str = ""
    error: DomainError | None = None


def _settle(
    *,
    started: Started,
    event: protocol.Event,
    model: str,
    pool: str,
    answer: str | None = None,
) -> UsageRecord | None:
    """Record the generation's usage once; ``answer`` (the whole text) is offered to
    the answer caches, which keep it only if the request was cacheable and complete."""
    usage = protocol.Usage.from_dict(event.data.get("usage"))
    finish_reason = event.data.get("finish_reason", "")
    if event.type == protocol.EVENT_DONE:
        status = _STATUS[finish_reason]
        ttft, latency = event.data.get("ttft_ms"), event.data.get("latency_ms")
    else:
        status, ttft, latency = UsageRecord.Status.ERROR, None, None
    return gateway.usage_settle(
        user_id=started.user_id,
        job_id=started.job_id,
        status=status,
        usage=usage,
        pool=pool,
        model=model,
        ttft_ms=ttft,
        latency_ms=latency,
        cache_hit=bool(started.cache_kind),
        answer=answer,
        finish_reason=finish_reason,
    )


def _outcome(event: protocol.Event, model: str) -> Outcome:
    usage = protocol.Usage.from_dict(event.data.get("usage"))
    if event.type == protocol.EVENT_DONE:
        return Outcome(_FINISH[event.data["finish_reason"]], usage, model)
    code = event.data.get("code") or protocol.ERROR_ENGINE
    error = GenerationFailed(
        event.data.get("message") or "The model failed while answering.", code=code
    )
    error.status = _FAILED_STATUS.get(code, 500)
    if error.status == 503:
        error.headers = {"Retry-After": str(settings.GATEWAY_SATURATED_RETRY_AFTER_S)}
    return Outcome("", protocol.Usage(), model, error)


async def _abandon(
    *, started: Started, pool: str, model: str, after: str, tokens_seen: int
) -> None:
    """The client left: cancel the job, then settle it once from its terminal event.

    Waits up to API_CANCEL_SETTLE_WAIT_S seconds for the worker's terminal event (its
    exact usage); without one (the job was still queued) it settles what was relayed
    (``tokens_seen`` completion tokens, one per token event) as cancelled.
    """
    await sync_to_async(gateway.generation_cancel)(job_id=started.job_id)
    deadline = time.monotonic() + settings.API_CANCEL_SETTLE_WAIT_S
    while time.monotonic() < deadline:
        events = await inference_client.agen_read(
            job_id=started.job_id, after=after, block_ms=200
        )
        for event in events:
            after = event.id
            if event.type == protocol.EVENT_META:
                model = event.data.get("model") or model
            elif event.is_terminal:
                await db_brief(_settle)(
                    started=started, event=event, model=model, pool=pool
                )
                return
    await db_brief(gateway.usage_settle)(
        user_id=started.user_id,
        job_id=started.job_id,
        status=UsageRecord.Status.CANCELLED,
        usage=protocol.Usage(completion_tokens=tokens_seen),
        pool=pool,
        model=model,
    )


async def _abandon_admission(admission: asyncio.Future[Any]) -> None:
    """The client left while its request was being admitted: wait for the admission
    step to end and, if it started a generation, cancel and settle it (:func:`_abandon`).
    """
    try:
        started, _req = await admission
    except Exception:  # rejected (DomainError) or failed: nothing was left running
        return
    await _abandon(
        started=started,
        pool=started.pool,
        model=started.model,
        after=protocol.STREAM_START,
        tokens_seen=0,
    )


async def generation_relay(started: Started) -> AsyncIterator[str | Outcome]:
    """Yield the answer's text deltas, then its :class:`Outcome` (usage settled).

    A generation that fails before its first token is retried on the fallback pool
    (gateway) and read again from its start. If the consumer stops early (client
    disconnect: CancelledError, or the generator is closed) the job is cancelled and
    settled by :func:`_abandon`.
    """
    after = protocol.STREAM_START
    pool, model = started.pool, started.model
    begun, tokens_seen, settled = False, 0, False
    parts: list[str] = []  # the answer, for the caches
    last_event_at = started.enqueued_at
    task = asyncio.current_task()
    try:
        while True:
            events = await inference_client.agen_read(
                job_id=started.job_id, after=after, block_ms=READ_BLOCK_MS
            )
            if task is not None and task.cancelling():
                # see conversations/sse.py: redis-py can absorb Django's CancelledError
                raise asyncio.CancelledError
            if not events:
                await sync_to_async(inference_client.generation_watchdog)(
                    job_id=started.job_id,
                    pool=pool,
                    enqueued_at=started.enqueued_at,
                    queue_timeout_s=settings.INFERENCE_QUEUE_TIMEOUT_S,
                    no_worker_grace_s=settings.INFERENCE_NO_WORKER_GRACE_S,
                    started=begun,
                    last_event_at=last_event_at,
                )
                continue
            begun, last_event_at, after = True, time.time(), events[-1].id
            for event in events:
                if event.type == protocol.EVENT_META:
                    model = event.data.get("model") or model
                elif event.type == protocol.EVENT_TOKEN:
                    tokens_seen += 1
                    parts.append(event.data["t"])
                    yield event.data["t"]
                elif event.is_terminal:
                    if event.type == protocol.EVENT_ERROR and not tokens_seen:
                        retried = await db_brief(gateway.generation_retry)(
                            job_id=started.job_id,
                            pool=pool,
                            error_code=event.data.get("code", ""),
                            terminal_id=event.id,
                        )
                        if retried:
                            pool, after, begun = retried, protocol.STREAM_START, False
                            break
                    await db_brief(_settle)(
                        started=started,
                        event=event,
                        model=model,
                        pool=pool,
                        answer="".join(parts),
                    )
                    settled = True
                    yield _outcome(event, model)
                    return
    finally:
        if not settled:
            await _abandon(
                started=started,
                pool=pool,
                model=model,
                after=after,
                tokens_seen=tokens_seen,
            )


def _completion_id(started: Started) -> str:
    return "chatcmpl-" + started.job_id.replace("-", "")


def usage_json(usage: protocol.Usage) -> dict[str, Any]:
    """OpenAI's ``usage`` object (tokens)."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def _data(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def completion_stream(
    started: Started, include_usage: bool
) -> AsyncIterator[str]:
    """Yield the SSE lines of a streamed completion (chunks, then ``data: [DONE]``)."""
    cid = _completion_id(started)

    def chunk(
        model: str, delta: dict[str, Any], finish: str | None = None
    ) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": started.created,
            "model": model,
            "system_fingerprint": None,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            ],
        }
        if include_usage:
            obj["usage"] = None
        return obj

    model = started.model
    yield _data(chunk(model, {"role": "assistant", "content": ""}))
    async with aclosing(generation_relay(started)) as relay:
        async for item in relay:
            if isinstance(item, str):
                yield _data(chunk(model, {"content": item}))
                continue
            if item.error is not None:
                yield _data(error_body(item.error))
                return
            model = item.model or model
            yield _data(chunk(model, {}, item.finish_reason))
            if include_usage:
                final = chunk(model, {})
                final["choices"], final["usage"] = [], usage_json(item.usage)
                yield _data(final)
            yield "data: [DONE]\n\n"


async def completion_collect(started: Started) -> HttpResponse:
    """Wait for the whole answer; return one ``chat.completion`` (or its error)."""
    parts: list[str] = []
    outcome = Outcome()
    async with aclosing(generation_relay(started)) as relay:
        async for item in relay:
            if isinstance(item, str):
                parts.append(item)
            else:
                outcome = item
    if outcome.error is not None:
        return api_error(outcome.error)
    return JsonResponse(
        {
            "id": _completion_id(started),
            "object": "chat.completion",
            "created": started.created,
            "model": outcome.model or started.model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "".join(parts),
                        "refusal": None,
                    },
                    "logprobs": None,
                    "finish_reason": outcome.finish_reason,
                }
            ],
            "usage": usage_json(outcome.usage),
        }
    )


def _method_not_allowed(method: str) -> JsonResponse:
    exc = InvalidInput(f"Use {method} on this endpoint.", code="method_not_allowed")
    exc.status = 405
    response = api_error(exc)
    response["Allow"] = method
    return response


@csrf_exempt
@login_not_required
async def chat_completions(request: HttpRequest) -> HttpResponse:
    """``POST /v1/chat/completions``: an OpenAI chat completion, streamed or not."""
    if request.method != "POST":
        return _method_not_allowed("POST")
    # A disconnect cancels this view, but not the sync step (it runs on in its thread):
    # shielded, its result is still ours, and what it enqueued is cancelled and settled.
    admission = asyncio.ensure_future(db_brief(_authenticate_and_start)(request))
    try:
        started, req = await asyncio.shield(admission)
    except DomainError as exc:
        return api_error(exc)
    except asyncio.CancelledError:
        await _abandon_admission(admission)
        raise
    if not req.stream:
        response = await completion_collect(started)
    else:
        response = StreamingHttpResponse(
            completion_stream(started, req.include_usage),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
    if started.cache_kind:
        response[CACHE_HEADER] = started.cache_kind
    return response


def _models_json(user: AbstractBaseUser) -> dict[str, Any]:
    pools = gateway_selectors.pool_choices(user=user)
    if not gateway_selectors.gateway_config().pools:
        pools = [gateway_selectors.pool_default()]
    return {
        "object": "list",
        "data": [
            {
                "id": p.name,
                "object": "model",
                "created": 0,
                "owned_by": "chatsite",
                "root": p.model or p.name,
            }
            for p in pools
        ],
    }


@csrf_exempt
@login_not_required
async def models_list(request: HttpRequest) -> HttpResponse:
    """``GET /v1/models``: the enabled pools the key's user may use (ids = pool names)."""
    if request.method != "GET":
        return _method_not_allowed("GET")
    try:
        body = await db_brief(lambda: _models_json(_api_user(request)))()
    except DomainError as exc:
        return api_error(exc)
    return JsonResponse(body)

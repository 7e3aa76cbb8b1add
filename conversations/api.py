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
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from chatsite.db import db_brief
from chatsite.errors import DomainError, InvalidInput, NotFound, PayloadTooLarge
from gateway import generations
from gateway import selectors as gateway_selectors
from gateway import services as gateway
from gateway.cache import CachePolicy
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


class InvalidApiKey(DomainError):
    """A missing, unknown or revoked API key (401)."""

    status = 401
    code = "invalid_api_key"
    message = (
        "Incorrect or missing API key. Send `Authorization: Bearer sk-...` with a key "
        "from your settings page."
    )


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


def prompt_tokens_reserve(messages: list[dict[str, str]]) -> int:
    """Return the prompt tokens to reserve for an API request.

    The count of the serving model's tokenizer and chat template (the one chat turns
    are built with, MEMORY_TOKENIZER_ENGINE; ~0.6 ms), never below the gateway's
    character estimate (a pool serving another model may tokenize differently).
    The template matters: SmolLM2's adds its own system prompt when a request has
    none, so "hi" is 31 prompt tokens where the estimate says 7.
    """
    count = prompt_counter(settings.MEMORY_TOKENIZER_ENGINE)(messages)
    return max(count, generations.prompt_tokens_estimate(messages))


def _cache_policy(req: CompletionRequest) -> CachePolicy | None:
    """The answer caches (:mod:`gateway.cache`) an API request may use.

    At temperature 0 the exact cache (an identical request gets the identical answer);
    with ``cache`` true also at other temperatures, and then a single-turn prompt may
    use the semantic cache too (an API request carries no personal context: no memory
    is injected). The semantic cache is approximate and embedding the prompt costs
    ~13 ms of CPU, so temperature 0 alone does not use it. ``cache`` false: none.
    """
    if req.cache is False:
        return None
    return CachePolicy(
        single_turn=True,
        personal=False,
        opt_in=bool(req.cache),
        semantic=bool(req.cache),
    )


def _start(*, user: AbstractBaseUser, req: CompletionRequest) -> generations.Generation:
    """Start the request's generation (:func:`gateway.generations.generation_start`):
    admit, reserve and submit; nothing stays reserved if it raises. A cache hit is
    served by the gateway without a job."""
    _model_check(req.model)
    started = generations.generation_start(
        user=user,
        messages=req.messages,
        prompt_tokens=prompt_tokens_reserve(req.messages),
        params=req.params,
        model=req.model,
        cache_policy=_cache_policy(req),
    )
    generation = started.generation
    generation.model = started.admission.model or req.model
    return generation


def _authenticate_and_start(
    request: HttpRequest,
) -> tuple[generations.Generation, CompletionRequest]:
    """Authenticate, validate the body, admit and enqueue: one sync step (one thread
    hop, one pooled connection) for the whole admission path."""
    user = _api_user(request)
    req = completion_request_parse(request.body)
    return _start(user=user, req=req), req


async def _abandon_admission(admission: asyncio.Future[Any]) -> None:
    """The client left while its request was being admitted: wait for the admission
    step to end and, if it started a generation, cancel and settle it."""
    try:
        generation, _req = await admission
    except Exception:  # rejected (DomainError) or failed: nothing was left running
        return
    await generations.generation_leave(generation)


def _completion_id(generation: generations.Generation) -> str:
    return "chatcmpl-" + generation.job_id.replace("-", "")


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
    generation: generations.Generation, include_usage: bool
) -> AsyncIterator[str]:
    """Yield the SSE lines of a streamed completion (chunks, then ``data: [DONE]``)."""
    cid = _completion_id(generation)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": generation.created,
            "model": generation.model,
            "system_fingerprint": None,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            ],
        }
        if include_usage:
            obj["usage"] = None
        return obj

    yield _data(chunk({"role": "assistant", "content": ""}))
    async with aclosing(generations.generation_follow(generation)) as items:
        async for item in items:
            if isinstance(item, generations.Delta):
                yield _data(chunk({"content": item.text}))
            elif isinstance(item, generations.Broken):
                yield _data(error_body(item.error))
                return
            elif isinstance(item, generations.Ended):
                outcome = item.outcome
                if outcome.error is not None:
                    yield _data(error_body(outcome.error))
                    return
                yield _data(chunk({}, outcome.openai_finish_reason))
                if include_usage:
                    final = chunk({})
                    final["choices"], final["usage"] = [], usage_json(outcome.usage)
                    yield _data(final)
                yield "data: [DONE]\n\n"
                return


async def completion_collect(generation: generations.Generation) -> HttpResponse:
    """Wait for the whole answer; return one ``chat.completion`` (or its error)."""
    parts: list[str] = []
    async with aclosing(generations.generation_follow(generation)) as items:
        async for item in items:
            if isinstance(item, generations.Delta):
                parts.append(item.text)
            elif isinstance(item, generations.Broken):
                return api_error(item.error)
            elif isinstance(item, generations.Ended):
                outcome = item.outcome
                break
    if outcome.error is not None:
        return api_error(outcome.error)
    return JsonResponse(
        {
            "id": _completion_id(generation),
            "object": "chat.completion",
            "created": generation.created,
            "model": outcome.model or generation.model,
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
                    "finish_reason": outcome.openai_finish_reason,
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
        generation, req = await asyncio.shield(admission)
    except DomainError as exc:
        return api_error(exc)
    except asyncio.CancelledError:
        await _abandon_admission(admission)
        raise
    if not req.stream:
        response = await completion_collect(generation)
    else:
        response = StreamingHttpResponse(
            completion_stream(generation, req.include_usage),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
    if generation.cache_kind:
        response[CACHE_HEADER] = generation.cache_kind
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

"""The API's async views: authenticate, parse, call the gateway, render.

Chat completions go through :mod:`.stream` (the gateway's generation lifecycle),
embeddings through :mod:`gateway.embeddings`; both split their sync step (the API key,
the body, admission: one thread hop, one pooled connection) from the async wait.

Served by ``chatsite.asgi``'s API handler (no session, CSRF or login middleware);
the decorators keep the views correct under the site's middleware too. Every response
to a request that was counted against the plan's requests per minute carries OpenAI's
``x-ratelimit-limit-requests``, ``-remaining-requests`` and ``-reset-requests`` of
the tighter of the user's and the key's windows (:func:`_request_count_headers`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chatsite.db import db_brief, db_quick
from chatsite.errors import (
    DomainError,
    InvalidApiKey,
    InvalidInput,
    MethodNotAllowed,
    NotFound,
    error_response,
)
from conversations.openai import chunks
from conversations.openai.embedding_requests import (
    EmbeddingRequest,
    embedding_request_parse,
)
from conversations.openai.requests import CompletionRequest, completion_request_parse
from conversations.openai.stream import (
    Generation,
    admission_abandon,
    completion_collect,
    completion_first,
    completion_start,
    completion_stream,
    tools_forced,
)
from conversations.views_moderation import appeal_json
from gateway import embeddings as gateway_embeddings
from gateway import selectors as gateway_selectors
from gateway import services as gateway
from gateway.requestrate import RequestCount
from safety.appeals import answer_event_id, appeal_create

# Response header naming the cache that answered ("exact" / "semantic"); absent: a model.
CACHE_HEADER = "x-chatsite-cache"
# The request's attribute holding its RequestCount once it was counted.
_COUNTED_ATTR = "chatsite_request_count"

_P = ParamSpec("_P")
_R = TypeVar("_R", bound=HttpResponseBase)


def _wrong_method(allowed: str) -> JsonResponse:
    """The 405 of an endpoint that takes only the ``allowed`` method (with ``Allow``)."""
    exc = MethodNotAllowed(
        f"Use {allowed} on this endpoint.", headers={"Allow": allowed}
    )
    return error_response(exc, openai=True)


def _bearer(request: HttpRequest) -> str:
    """The token of the request's ``Authorization: Bearer`` header ("" without one),
    read from ``META`` as it is (``request.headers`` would first copy every header)."""
    scheme, _, raw = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return raw.strip() if scheme.lower() == "bearer" else ""


def _api_user(request: HttpRequest) -> User:
    """Return the user of the request's API key, counted against their requests per
    minute; raise InvalidApiKey (401) or QuotaExceeded (429)."""
    user = gateway.api_key_authenticate(raw=_bearer(request))
    if user is None:
        raise InvalidApiKey()
    setattr(request, _COUNTED_ATTR, gateway.api_request_count(user=user))
    return user


def _request_count_headers(
    view: Callable[Concatenate[HttpRequest, _P], Coroutine[Any, Any, _R]],
) -> Callable[Concatenate[HttpRequest, _P], Coroutine[Any, Any, _R]]:
    """Add the ``x-ratelimit-*-requests`` headers of the request's count
    (:meth:`gateway.requestrate.RequestCount.headers`; none without a limit) to the
    response of ``view``, success or error, once :func:`_api_user` counted the request
    (a 401 is not counted; the requests-per-minute 429 carries its own)."""

    @functools.wraps(view)
    async def wrapped(request: HttpRequest, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        response = await view(request, *args, **kwargs)
        counted: RequestCount | None = getattr(request, _COUNTED_ATTR, None)
        if counted is not None:
            for name, value in counted.headers().items():
                if not response.has_header(name):
                    response[name] = value
        return response

    return wrapped


def _authenticate_and_start(
    request: HttpRequest,
) -> tuple[Generation, CompletionRequest]:
    """Authenticate, validate the body, admit and enqueue: one sync step (one hop to
    a reused thread, :func:`chatsite.db.db_quick`; the database only on an API key
    cache miss) for the whole admission path.

    The request is counted against its requests per minute by the token
    reservation's own script (one Redis round trip for both); a request refused or
    failed before that is counted then, so every authenticated request counts and
    the limit's 429 comes first, as if counted at once (:func:`_api_user`).
    """
    user = gateway.api_key_authenticate(raw=_bearer(request))
    if user is None:
        raise InvalidApiKey()
    counter = gateway.api_request_counter(user=user)
    try:
        req = completion_request_parse(request.body)
        return completion_start(user=user, req=req, counter=counter), req
    except Exception:
        counter.count()  # no-op once counted; raises the limit's 429 first
        raise
    finally:
        if counter.counted is not None:
            setattr(request, _COUNTED_ATTR, counter.counted)


@csrf_exempt
@login_not_required
@_request_count_headers
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    """``POST /v1/chat/completions``: an OpenAI chat completion, streamed or not."""
    if request.method != "POST":
        return _wrong_method("POST")
    # A disconnect cancels this view, but not the sync step (it runs on in its thread):
    # shielded, its result is still ours, and what it enqueued is cancelled and settled.
    admission = db_quick(_authenticate_and_start)(request)  # queued now: a Future
    try:
        generation, req = await asyncio.shield(admission)
    except DomainError as exc:
        return error_response(exc, openai=True)
    except asyncio.CancelledError:
        await admission_abandon(admission)
        raise
    response: HttpResponseBase
    if not req.stream:
        try:
            response = JsonResponse(await completion_collect(generation))
        except DomainError as exc:
            response = error_response(exc, openai=True)
    else:
        items, held = None, None
        if tools_forced(req.params):
            # a tool schema the engine refuses is a 400 before any stream starts:
            # the headers wait for the first token (or that refusal)
            items, held, refused = await completion_first(generation)
            if refused is not None:
                return error_response(refused, openai=True)
        response = StreamingHttpResponse(
            completion_stream(generation, req.include_usage, items=items, held=held),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
    if generation.cache_kind:
        response[CACHE_HEADER] = generation.cache_kind
    return response


def _models(request: HttpRequest) -> list[tuple[str, str, str]]:
    """The ``(id, root model, kind)`` of the pools the key's user may use: the enabled
    pools of every kind their plan allows (chat first), with the default chat pool
    when the database defines no chat pool."""
    pools = gateway_selectors.pool_choices(user=_api_user(request), kind=None)
    if not gateway_selectors.chat_pools_defined():
        pools = [gateway_selectors.pool_default(), *pools]
    return [(p.name, p.model or p.name, p.kind) for p in pools]


@csrf_exempt
@login_not_required
@_request_count_headers
async def models_list(request: HttpRequest) -> HttpResponse:
    """``GET /v1/models``: the enabled pools the key's user may use (ids = pool names),
    each with its ``kind`` (``chat`` or ``embedding``)."""
    if request.method != "GET":
        return _wrong_method("GET")
    try:
        models = await db_brief(_models)(request)
    except DomainError as exc:
        return error_response(exc, openai=True)
    return JsonResponse(chunks.model_list_json(models))


def _authenticate_and_admit(
    request: HttpRequest,
) -> tuple[gateway_embeddings.EmbeddingAdmission, EmbeddingRequest]:
    """Authenticate, validate the body, route and reserve: the sync step of an
    embeddings request."""
    user = _api_user(request)
    req = embedding_request_parse(request.body)
    admission = gateway_embeddings.embedding_admit(
        user=user, texts=req.texts, model=req.model, dimensions=req.dimensions
    )
    return admission, req


@csrf_exempt
@login_not_required
@_request_count_headers
async def embeddings(request: HttpRequest) -> HttpResponse:
    """``POST /v1/embeddings``: one vector per input text, OpenAI's shape."""
    if request.method != "POST":
        return _wrong_method("POST")
    # As for completions: a disconnect during the sync step does not stop it, so its
    # reservation is given back once it ends (a later one is given back by the
    # gateway's embedding_create itself).
    admitting = asyncio.ensure_future(db_brief(_authenticate_and_admit)(request))
    try:
        admission, req = await asyncio.shield(admitting)
    except DomainError as exc:
        return error_response(exc, openai=True)
    except asyncio.CancelledError:
        await _admission_release(admitting)
        raise
    try:
        result = await gateway_embeddings.embedding_create(
            admission=admission, texts=req.texts
        )
    except DomainError as exc:
        return error_response(exc, openai=True)
    return JsonResponse(
        chunks.embedding_list_json(
            vectors=result.vectors,
            model=admission.model,
            prompt_tokens=result.tokens,
            encoding_format=req.encoding_format,
        )
    )


async def _admission_release(
    admitting: asyncio.Future[
        tuple[gateway_embeddings.EmbeddingAdmission, EmbeddingRequest]
    ],
) -> None:
    """The client left during admission: once it ends, give back what it reserved."""
    try:
        admission, _req = await admitting
    except Exception:  # refused (DomainError) or failed: nothing was reserved
        return
    await sync_to_async(gateway_embeddings.embedding_release, thread_sensitive=False)(
        admission=admission
    )


def _appeal_comment(request: HttpRequest) -> Any:
    """The optional ``comment`` of an appeal's JSON body; raise InvalidInput for a
    body that is not JSON."""
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        raise InvalidInput("The body must be JSON.", code="invalid_json") from None
    return body.get("comment", "") if isinstance(body, dict) else ""


def _appeal(request: HttpRequest, event_id: int) -> dict[str, Any]:
    """Authenticate and appeal the key's user's event ``event_id``."""
    user = _api_user(request)
    comment = _appeal_comment(request)
    return appeal_json(appeal_create(user=user, event_id=event_id, comment=comment))


def _completion_appeal(request: HttpRequest, completion_id: str) -> dict[str, Any]:
    """Authenticate and appeal the cut of the key's user's completion
    ``completion_id`` (``chatcmpl-`` and the job's UUID hex); raise NotFound for
    another id, another user's completion or one output moderation did not cut."""
    user = _api_user(request)
    comment = _appeal_comment(request)
    prefix, _, hex_id = completion_id.partition("-")
    try:
        if prefix != "chatcmpl":
            raise ValueError(completion_id)
        job_id = uuid.UUID(hex=hex_id)
    except ValueError:
        raise NotFound("This completion does not exist.") from None
    event_id = answer_event_id(user=user, job_id=job_id)
    return appeal_json(appeal_create(user=user, event_id=event_id, comment=comment))


@csrf_exempt
@login_not_required
@_request_count_headers
async def moderation_appeal(request: HttpRequest, event_id: int) -> HttpResponse:
    """``POST /v1/moderation/events/<id>/appeal``: appeal a moderation decision of the
    key's user (the id is an error body's ``moderation_event_id``); 201, or 404 for an
    unknown id or another user's event."""
    return await _appeal_respond(_appeal, request, event_id)


@csrf_exempt
@login_not_required
@_request_count_headers
async def completion_appeal(request: HttpRequest, completion_id: str) -> HttpResponse:
    """``POST /v1/moderation/completions/<id>/appeal``: appeal the cut of one of the
    key's user's completions by output moderation (the id is the completion's ``id``;
    the cut answer's ``content_filter.appeal_url``); 201, or 404 for an unknown id,
    another user's completion or one that was not cut."""
    return await _appeal_respond(_completion_appeal, request, completion_id)


async def _appeal_respond(
    appeal: Callable[[HttpRequest, Any], dict[str, Any]],
    request: HttpRequest,
    ref: Any,
) -> HttpResponse:
    """Run ``appeal(request, ref)`` for a POST: 201 with its body, the error's status
    for a DomainError, 405 for another method."""
    if request.method != "POST":
        return _wrong_method("POST")
    try:
        data = await db_brief(appeal)(request, ref)
    except DomainError as exc:
        return error_response(exc, openai=True)
    return JsonResponse(data, status=201)

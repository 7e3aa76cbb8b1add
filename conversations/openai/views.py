"""The API's two async views: authenticate, parse, call :mod:`.stream`, render.

Served by ``chatsite.asgi``'s API handler (no session, CSRF or login middleware);
the decorators keep the views correct under the site's middleware too.
"""

from __future__ import annotations

import asyncio

from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from chatsite.db import db_brief
from chatsite.errors import DomainError
from conversations.openai import chunks
from conversations.openai.errors import (
    InvalidApiKey,
    error_response,
    method_not_allowed,
)
from conversations.openai.requests import CompletionRequest, completion_request_parse
from conversations.openai.stream import (
    Generation,
    admission_abandon,
    completion_collect,
    completion_stream,
    generation_start,
)
from gateway import selectors as gateway_selectors
from gateway import services as gateway

# Response header naming the cache that answered ("exact" / "semantic"); absent: a model.
CACHE_HEADER = "x-chatsite-cache"


def _bearer(request: HttpRequest) -> str:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    return raw.strip() if scheme.lower() == "bearer" else ""


def _api_user(request: HttpRequest) -> AbstractBaseUser:
    """Return the user of the request's API key; raise InvalidApiKey (401)."""
    user = gateway.api_key_authenticate(raw=_bearer(request))
    if user is None:
        raise InvalidApiKey()
    return user


def _authenticate_and_start(
    request: HttpRequest,
) -> tuple[Generation, CompletionRequest]:
    """Authenticate, validate the body, admit and enqueue: one sync step (one thread
    hop, one pooled connection) for the whole admission path."""
    user = _api_user(request)
    req = completion_request_parse(request.body)
    return generation_start(user=user, req=req), req


@csrf_exempt
@login_not_required
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    """``POST /v1/chat/completions``: an OpenAI chat completion, streamed or not."""
    if request.method != "POST":
        return method_not_allowed("POST")
    # A disconnect cancels this view, but not the sync step (it runs on in its thread):
    # shielded, its result is still ours, and what it enqueued is cancelled and settled.
    admission = asyncio.ensure_future(db_brief(_authenticate_and_start)(request))
    try:
        generation, req = await asyncio.shield(admission)
    except DomainError as exc:
        return error_response(exc)
    except asyncio.CancelledError:
        await admission_abandon(admission)
        raise
    response: HttpResponseBase
    if not req.stream:
        try:
            response = JsonResponse(await completion_collect(generation))
        except DomainError as exc:
            response = error_response(exc)
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


def _models(request: HttpRequest) -> list[tuple[str, str]]:
    """The ``(id, root model)`` of the pools the key's user may use: the enabled pools
    their plan allows, or the default pool when the database defines none."""
    pools = gateway_selectors.pool_choices(user=_api_user(request))
    if not gateway_selectors.gateway_config().pools:
        pools = [gateway_selectors.pool_default()]
    return [(p.name, p.model or p.name) for p in pools]


@csrf_exempt
@login_not_required
async def models_list(request: HttpRequest) -> HttpResponse:
    """``GET /v1/models``: the enabled pools the key's user may use (ids = pool names)."""
    if request.method != "GET":
        return method_not_allowed("GET")
    try:
        models = await db_brief(_models)(request)
    except DomainError as exc:
        return error_response(exc)
    return JsonResponse(chunks.model_list_json(models))

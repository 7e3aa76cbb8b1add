"""Chat UI views: thin (CONVENTIONS §2) — validate, call one service, render or serialise.

JSON endpoints answer errors as ``{"error": {"code", "message"}}`` via
:func:`chatsite.http.json_errors` (:func:`chatsite.errors.error_response`), pages with
:func:`chatsite.errors.error_page`; every object is looked up by owner (404 otherwise).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import (
    require_http_methods,
    require_POST,
    require_safe,
)

from chatsite.auth import AuthenticatedRequest
from chatsite.errors import (
    DomainError,
    InvalidInput,
    NotFound,
    error_page,
)
from chatsite.http import json_errors, uuid_urls
from chatsite.jsonbody import json_loads_bounded
from conversations import selectors, services, sse
from conversations.models import Feedback
from conversations.services import Turn
from conversations.services.feedback import REASONS_BY_RATING
from conversations.services.turns.registry import tools_menu
from gateway import selectors as gateway_selectors
from gateway.ratelimits import message_ratelimit
from memory import selectors as memory_selectors
from safety import selectors as safety_selectors


def _turn_json(turn: Turn) -> dict[str, Any]:
    conv, answer = turn.conversation, turn.assistant_message
    question = turn.user_message
    c, q, a = conv.id, question.id, answer.id
    urls = uuid_urls(
        [
            ("conversation-detail", (c,)),
            ("message-edit", (c, q)),
            ("conversation-thread", (c,)),
            ("message-regenerate-one", (c, a)),
            ("message-stream", (c, a)),
            ("message-stop", (c, a)),
            ("message-feedback", (c, a)),
        ]
    )
    return {
        "conversation": {
            "id": str(c),
            "title": conv.title,
            "url": urls[0],
            "created": turn.created_conversation,
        },
        "user_message": {"id": str(q), "edit_url": urls[1]},
        "thread_url": urls[2],
        "assistant_message": {
            "id": str(a),
            "regenerate_url": urls[3],
            "status": answer.status,
            "stream_url": urls[4],
            "stop_url": urls[5],
            "feedback_url": urls[6],
        },
    }


def _chat_page(request: AuthenticatedRequest, conversation: Any = None) -> HttpResponse:
    suspension = safety_selectors.suspension_active(user=request.user)
    context = {
        "suspension_notice": safety_selectors.suspension_message(suspension)
        if suspension
        else "",
        "suspension_cause_id": suspension.cause_id if suspension else None,
        "suspension_cause_appealed": safety_selectors.event_appealed(
            event_id=suspension.cause_id if suspension else None
        ),
        "conversation": conversation,
        "items": selectors.thread_items(conversation=conversation)
        if conversation
        else [],
        "max_chars": settings.CHAT_MAX_MESSAGE_CHARS,
        "quota": gateway_selectors.quota_status(user=request.user),
        "show_quota": True,  # the sidebar's token counter (templates/_sidebar_…)
        "models": gateway_selectors.pool_choices(user=request.user),
        "feedback_reasons": _down_reasons(),
        "default_model": gateway_selectors.default_model(user=request.user),
        "tool_menu": tools_menu(user=request.user),
        **_scope_context(request, conversation),
    }
    context["start_model"] = _start_model(context["models"], context["default_model"])
    return render(request, "chat/chat.html", context)


def _start_model(pools: Any, default: str | None) -> str:
    """The model the start page names: the user's default pool's model, else the first
    pool's ("" when the plan allows none). ``pools``: ModelPool rows (pool_choices)."""
    chosen = [p for p in pools if p.name == default] or list(pools)[:1]
    return (chosen[0].model or chosen[0].name) if chosen else ""


def _down_reasons() -> list[tuple[str, str]]:
    """The reasons a thumbs down may give, as ``(value, label)`` in the model's order."""
    allowed = REASONS_BY_RATING[Feedback.Rating.DOWN]
    return [(r.value, r.label) for r in Feedback.Reason if r in allowed]


def _scope_context(request: AuthenticatedRequest, conversation: Any) -> dict[str, Any]:
    """The document scope control's data: the user's ready documents, the scope in
    force (a new chat: CHAT_DOCUMENT_SCOPE_DEFAULT) and the chosen ids."""
    if conversation is None:
        kind, chosen = settings.CHAT_DOCUMENT_SCOPE_DEFAULT, []
    else:
        kind = conversation.doc_scope
        chosen = selectors.conversation_scope_ids(conversation=conversation)
    return {
        "scope_documents": memory_selectors.document_choices(user=request.user),
        "doc_scope": kind,
        "scope_chosen": chosen,
    }


@require_safe
def chat_home(request: AuthenticatedRequest) -> HttpResponse:
    """The chat page with a new, empty conversation."""
    return _chat_page(request)


@require_safe
def conversation_detail(
    request: AuthenticatedRequest, conversation_id: Any
) -> HttpResponse:
    """The chat page showing one of the user's conversations."""
    try:
        conversation = selectors.conversation_get(
            user=request.user, conversation_id=conversation_id
        )
    except DomainError as exc:
        return error_page(request, exc)
    return _chat_page(request, conversation)


@require_POST
@message_ratelimit
@json_errors
def message_send(
    request: AuthenticatedRequest, conversation_id: Any = None
) -> HttpResponseBase:
    """Start a turn: store the message, queue the answer (``tool``: a tool its first
    step must call); 201 with its stream URL, or,
    asked with ``Accept: text/event-stream``, with the answer's stream itself (its
    first frame the same JSON: :func:`conversations.sse.turn_stream_response`).
    ``after``: the answer the message follows, on a branch the page shows without it
    being current (default: the current branch's last message)."""
    turn = services.turn_start(
        user=request.user,
        conversation_id=conversation_id,
        after_id=_message_id(request.POST.get("after")),
        content=request.POST.get("content"),
        model=request.POST.get("model") or None,
        doc_scope=request.POST.get("doc_scope") or None,
        document_ids=request.POST.getlist("documents"),
        tool=request.POST.get("tool") or None,
    )
    if sse.event_stream_accepted(request):
        return sse.turn_stream_response(_turn_json(turn), turn.assistant_message)
    return JsonResponse(_turn_json(turn), status=201)


@require_POST
@message_ratelimit
@json_errors
def message_regenerate(
    request: AuthenticatedRequest, conversation_id: Any, message_id: Any = None
) -> JsonResponse:
    """Answer again: a new version of the answer ``message_id`` (default: the answer
    to the last question shown), made current; earlier versions stay switchable."""
    turn = services.turn_regenerate(
        user=request.user, conversation_id=conversation_id, message_id=message_id
    )
    return JsonResponse(_turn_json(turn), status=201)


@require_POST
@message_ratelimit
@json_errors
def message_continue(
    request: AuthenticatedRequest, conversation_id: Any, message_id: Any
) -> JsonResponse:
    """Write on an answer that was cut short, in place: 201 with the turn's JSON, whose
    ``assistant_message`` is that same answer, streaming again at its stream URL."""
    turn = services.turn_continue(
        user=request.user, conversation_id=conversation_id, message_id=message_id
    )
    return JsonResponse(_turn_json(turn), status=201)


@require_POST
@message_ratelimit
@json_errors
def message_edit(
    request: AuthenticatedRequest, conversation_id: Any, message_id: Any
) -> JsonResponse:
    """Send an edited version of a user message (``content``): a new branch with a new
    answer, made current; 201 with its stream URL."""
    turn = services.turn_edit(
        user=request.user,
        conversation_id=conversation_id,
        message_id=message_id,
        content=request.POST.get("content"),
        model=request.POST.get("model") or None,
    )
    return JsonResponse(_turn_json(turn), status=201)


def _thread_html(
    request: AuthenticatedRequest, conversation_id: Any, through: Any = None
) -> str:
    conversation = selectors.conversation_get(
        user=request.user, conversation_id=conversation_id
    )
    items = selectors.thread_items(conversation=conversation, through=through)
    return render_to_string("chat/_thread.html", {"items": items}, request=request)


def _message_id(value: str | None) -> uuid.UUID | None:
    """The message id of a form or query field (None when absent); raises NotFound
    for text that is no message id."""
    if not value:
        return None
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise NotFound("This message does not exist.") from exc


@require_POST
@json_errors
def message_switch(
    request: AuthenticatedRequest, conversation_id: Any, message_id: Any
) -> JsonResponse:
    """Show the branch through a message version: its newest leaf becomes current
    (stored); answers ``{"leaf_id", "html"}``, the branch's messages rendered."""
    leaf = services.thread_switch(
        user=request.user, conversation_id=conversation_id, message_id=message_id
    )
    return JsonResponse(
        {"leaf_id": str(leaf.id), "html": _thread_html(request, conversation_id)}
    )


@require_safe
@json_errors
def conversation_thread(
    request: AuthenticatedRequest, conversation_id: Any
) -> HttpResponse:
    """The current branch's messages as an HTML fragment (the page's thread); with
    ``?through=<message id>`` the branch through that message instead, for viewing
    only (a search result on another branch): the stored current branch stays until
    the user sends or regenerates there."""
    through = _message_id(request.GET.get("through"))
    return HttpResponse(_thread_html(request, conversation_id, through))


@require_POST
@json_errors
def message_stop(
    request: AuthenticatedRequest, conversation_id: Any, message_id: Any
) -> JsonResponse:
    """Stop a streaming answer; 202 — the stream ends with a ``done`` (cancelled) frame."""
    message = services.turn_stop(
        user=request.user, conversation_id=conversation_id, message_id=message_id
    )
    return JsonResponse(
        {"message_id": str(message.id), "status": message.status}, status=202
    )


def _body_fields(request: HttpRequest) -> dict[str, Any]:
    """The fields of a form post, or of a JSON object body; raise InvalidInput."""
    if request.content_type != "application/json":
        return request.POST.dict()
    try:
        data = json_loads_bounded(
            request.body or b"{}", max_depth=settings.JSON_MAX_DEPTH
        )
    except InvalidInput as exc:  # the chat's forms answer one code for bad input
        raise InvalidInput(exc.message) from exc
    if not isinstance(data, dict):
        raise InvalidInput("The request body must be a JSON object.")
    return data


@require_http_methods(["POST", "DELETE"])
@json_errors
def message_feedback(
    request: AuthenticatedRequest, conversation_id: Any, message_id: Any
) -> JsonResponse:
    """POST: rate an answer (``rating`` up/down, optional ``reason``, ``comment``;
    form fields or a JSON object), replacing an earlier rating. DELETE: remove it."""
    if request.method == "DELETE":
        removed = services.feedback_delete(
            user=request.user, conversation_id=conversation_id, message_id=message_id
        )
        return JsonResponse({"message_id": str(message_id), "removed": removed})
    fields = _body_fields(request)
    feedback = services.feedback_set(
        user=request.user,
        conversation_id=conversation_id,
        message_id=message_id,
        rating=fields.get("rating"),
        reason=fields.get("reason", ""),
        comment=fields.get("comment", ""),
    )
    return JsonResponse(
        {
            "message_id": str(feedback.message_id),
            "rating": feedback.rating,
            "reason": feedback.reason,
            "comment": feedback.comment,
        }
    )


@login_not_required
@require_http_methods(["GET", "HEAD", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    """Create an account and sign in."""
    if request.user.is_authenticated:
        return redirect("chat-home")
    form: UserCreationForm[User] = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend=settings.AUTHENTICATION_BACKENDS[0])
        return redirect("chat-home")
    return render(request, "registration/signup.html", {"form": form})

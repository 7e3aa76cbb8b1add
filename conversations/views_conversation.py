"""Chat UI views of a conversation as a whole: rename, its documents' scope, its
title (polled while it is written), delete. Thin like :mod:`conversations.views`;
every conversation is looked up by owner (404 otherwise).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages as flash
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import (
    require_http_methods,
    require_POST,
    require_safe,
)

from chatsite.auth import AuthenticatedRequest
from chatsite.errors import DomainError, error_page, error_response, wants_json
from chatsite.http import json_errors
from conversations import selectors, services


@require_POST
def conversation_rename(
    request: AuthenticatedRequest, conversation_id: Any
) -> HttpResponse:
    """Rename a conversation (form post; JSON when asked with Accept: application/json)."""
    as_json = wants_json(request)
    try:
        conversation = services.conversation_rename(
            user=request.user,
            conversation_id=conversation_id,
            title=request.POST.get("title"),
        )
    except DomainError as exc:
        if as_json or exc.status == 404:
            return error_response(exc)
        flash.error(request, exc.message)
        return redirect("conversation-detail", conversation_id)
    if as_json:
        return JsonResponse({"id": str(conversation.id), "title": conversation.title})
    return redirect("conversation-detail", conversation.id)


@require_POST
def conversation_documents(
    request: AuthenticatedRequest, conversation_id: Any
) -> HttpResponse:
    """Set which documents the conversation's answers search (``doc_scope``
    all/none/some, ``documents`` ids for some). JSON when asked with Accept:
    application/json, else a redirect back to the conversation (POST-redirect-GET)."""
    as_json = wants_json(request)
    try:
        conversation = services.conversation_scope_set(
            user=request.user,
            conversation_id=conversation_id,
            kind=request.POST.get("doc_scope"),
            document_ids=request.POST.getlist("documents"),
        )
    except DomainError as exc:
        if as_json or exc.status == 404:
            return error_response(exc)
        flash.error(request, exc.message)
        return redirect("conversation-detail", conversation_id)
    if not as_json:
        return redirect("conversation-detail", conversation.id)
    return JsonResponse(
        {
            "id": str(conversation.id),
            "doc_scope": conversation.doc_scope,
            "documents": selectors.conversation_scope_ids(conversation=conversation),
        }
    )


@require_safe
@json_errors
def conversation_title(
    request: AuthenticatedRequest, conversation_id: Any
) -> JsonResponse:
    """The conversation's current title as JSON ``{"id", "title"}`` (the chat page
    polls it after the first answer, while the title is written in the background)."""
    conversation = selectors.conversation_get(
        user=request.user, conversation_id=conversation_id
    )
    return JsonResponse({"id": str(conversation.id), "title": conversation.title})


@require_http_methods(["GET", "HEAD", "POST"])
def conversation_delete(
    request: AuthenticatedRequest, conversation_id: Any
) -> HttpResponse:
    """GET: ask for confirmation. POST: delete the conversation and its messages."""
    try:
        conversation = selectors.conversation_get(
            user=request.user, conversation_id=conversation_id
        )
        if request.method == "POST":
            services.conversation_delete(
                user=request.user, conversation_id=conversation_id
            )
            flash.success(request, f"Deleted “{conversation.title}”.")
            return redirect("chat-home")
    except DomainError as exc:
        return error_page(request, exc)
    return render(request, "chat/confirm_delete.html", {"conversation": conversation})

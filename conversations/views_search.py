"""Search, export and import pages: thin views (CONVENTIONS §2) over
:mod:`conversations.search`, :mod:`conversations.exports` and
:func:`conversations.services.conversations_import`."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib import messages as flash
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_http_methods, require_safe

from chatsite.auth import AuthenticatedRequest
from chatsite.errors import DomainError, InvalidInput, error_render
from conversations import exports, selectors, services
from conversations.search import conversation_search

_CONTENT_TYPES = {
    "json": "application/json; charset=utf-8",
    "md": "text/markdown; charset=utf-8",
}


@require_safe
def search_page(request: AuthenticatedRequest) -> HttpResponse:
    """The search results page (``?q=``, web-search syntax, words match as prefixes);
    the user's recent chats when ``q`` is blank or absent; 400 with the reason for a
    too long query or a NUL character."""
    query = request.GET.get("q", "")
    try:
        results = conversation_search(user=request.user, query=query)
        error, status = "", 200
    except DomainError as exc:
        results, error, status = [], exc.message, exc.status
    return render(
        request,
        "chat/search.html",
        {
            "query": query,
            "results": results,
            "error": error,
            "max_query_chars": settings.CHAT_SEARCH_MAX_QUERY_CHARS,
        },
        status=status,
    )


def _export(request: AuthenticatedRequest, conversation_id: Any = None) -> HttpResponse:
    try:
        kind = exports.export_kind_clean(request.GET.get("format"))
        title = None
        if conversation_id is not None:
            title = selectors.conversation_get(
                user=request.user, conversation_id=conversation_id
            ).title
        if kind == "json":
            body = json.dumps(
                exports.conversations_export_json(
                    user=request.user, conversation_id=conversation_id
                ),
                ensure_ascii=False,
                indent=1,
            )
        else:
            body = exports.conversations_export_markdown(
                user=request.user, conversation_id=conversation_id
            )
    except DomainError as exc:
        return error_render(request, exc)
    response = HttpResponse(body, content_type=_CONTENT_TYPES[kind])
    response["Content-Disposition"] = content_disposition_header(
        as_attachment=True, filename=exports.export_filename(title=title, kind=kind)
    )
    return response


@require_safe
def conversation_export(
    request: AuthenticatedRequest, conversation_id: Any
) -> HttpResponse:
    """Download one conversation: ``?format=json`` (every branch, importable) or
    ``?format=md`` (the displayed thread)."""
    return _export(request, conversation_id)


@require_safe
def conversations_export(request: AuthenticatedRequest) -> HttpResponse:
    """Download all of the user's conversations as one ``json`` or ``md`` file."""
    return _export(request)


@require_http_methods(["GET", "HEAD", "POST"])
def conversations_import_page(request: AuthenticatedRequest) -> HttpResponse:
    """GET: the import form. POST: import the uploaded file (all or nothing), then
    redirect (POST-redirect-GET) to the conversation imported, or back here."""
    if request.method == "POST":
        upload = request.FILES.get("file")
        try:
            if upload is None:
                raise InvalidInput("Choose a file to import.", code="no_file")
            # one byte over the limit is enough to say the file is too large
            data = upload.read(settings.CHAT_IMPORT_MAX_BYTES + 1)
            result = services.conversations_import(user=request.user, data=data)
        except DomainError as exc:
            flash.error(request, exc.message)
            return redirect("conversations-import")
        imported = result.conversations
        count = len(imported)
        flash.success(
            request,
            f"Imported {count} conversation{'s' if count != 1 else ''}.",
        )
        if result.flagged:
            flash.warning(request, result.notice())
        if count == 1:
            return redirect("conversation-detail", imported[0].id)
        return redirect("chat-home")
    return render(
        request,
        "chat/import.html",
        {
            "max_mb": settings.CHAT_IMPORT_MAX_BYTES // (1024 * 1024),
        },
    )

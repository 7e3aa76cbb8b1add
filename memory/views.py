"""Documents and Memory pages: thin views (validate, call one service, render)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages as flash
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import (
    require_http_methods,
    require_POST,
    require_safe,
)

from chatsite.auth import AuthenticatedRequest
from chatsite.errors import (
    DomainError,
    InvalidInput,
    PageNotFound,
    error_page,
    wants_json,
)
from memory import selectors, services
from memory.extract import upload_too_large


def _not_found(request: HttpRequest) -> HttpResponse:
    return error_page(request, PageNotFound())


def _confirm(
    request: HttpRequest, *, title: str, message: str, action: str, cancel: str
) -> HttpResponse:
    """The confirmation page of a delete (its form POSTs to ``action``)."""
    return render(
        request,
        "confirm.html",
        {
            "title": title,
            "message": message,
            "action": action,
            "cancel": cancel,
            "button": "Delete",
        },
    )


@require_safe
def document_list(request: AuthenticatedRequest) -> HttpResponse:
    """The Documents page: the user's documents with their ingest status, and an upload form."""
    documents = selectors.document_list(user=request.user)
    if wants_json(request):
        return JsonResponse(
            {
                "documents": [
                    {
                        "id": d.id,
                        "title": d.title,
                        "status": d.status,
                        "status_display": d.get_status_display(),
                        "error": d.error,
                        "chunks": d.chunk_count,
                        "flagged_chunks": d.flagged_chunks,
                    }
                    for d in documents
                ]
            }
        )
    return render(
        request,
        "memory/documents.html",
        {
            "documents": documents,
            "max_bytes": settings.MEMORY_UPLOAD_MAX_BYTES,
        },
    )


@require_POST
def document_upload(request: AuthenticatedRequest) -> HttpResponse:
    """Upload a .txt/.md/.pdf: the file is stored as it is and read in the background
    (status on the page); only its name and size are checked here."""
    upload = request.FILES.get("file")
    try:
        if upload is None:
            raise InvalidInput("Choose a file to upload.", code="no_file")
        limit = settings.MEMORY_UPLOAD_MAX_BYTES
        if (upload.size or 0) > limit:
            raise upload_too_large(upload.name or "", limit)
        data = upload.read(limit + 1)
        document = services.document_upload(
            user=request.user, name=upload.name or "", data=data
        )
    except DomainError as exc:
        flash.error(request, exc.message)
        return redirect("document-list")
    flash.success(request, f"“{document.title}” uploaded; it is being processed.")
    return redirect("document-list")


@require_safe
def document_detail(request: AuthenticatedRequest, document_id: int) -> HttpResponse:
    """One document's passages, each with an anchor (``#p<ord>``) that citations link to."""
    try:
        document = selectors.document_get(user=request.user, document_id=document_id)
    except DomainError:
        return _not_found(request)
    chunks = document.chunks.defer("embedding").order_by("ord")
    return render(
        request, "memory/document.html", {"document": document, "chunks": chunks}
    )


@require_http_methods(["GET", "HEAD", "POST"])
def document_delete(request: AuthenticatedRequest, document_id: int) -> HttpResponse:
    """GET: ask for confirmation. POST: delete a document with its chunks and vectors."""
    try:
        document = selectors.document_get(user=request.user, document_id=document_id)
        if request.method in ("GET", "HEAD"):
            return _confirm(
                request,
                title="Delete this document?",
                message=f"“{document.title}” and its passages will be deleted; "
                "answers will no longer cite it. This cannot be undone.",
                action=reverse("document-delete", args=[document.id]),
                cancel=reverse("document-list"),
            )
        services.document_delete(user=request.user, document_id=document_id)
    except DomainError:
        return _not_found(request)
    flash.success(request, "Document deleted.")
    return redirect("document-list")


@require_safe
def memory_page(request: AuthenticatedRequest) -> HttpResponse:
    """The Memory page: what the assistant remembers, with edit/delete and an on/off switch."""
    return render(
        request,
        "memory/memory.html",
        {
            "facts": selectors.fact_list(user=request.user),
            "enabled": selectors.memory_enabled(user=request.user),
        },
    )


def _memory_action(request: HttpRequest, action: Any, done: str) -> HttpResponse:
    try:
        action()
    except DomainError as exc:
        if exc.status == 404:
            return _not_found(request)
        flash.error(request, exc.message)
        return redirect("memory-page")
    flash.success(request, done)
    return redirect("memory-page")


@require_POST
def fact_add(request: AuthenticatedRequest) -> HttpResponse:
    """Add a fact by hand."""
    try:
        fact = services.fact_add(
            user=request.user, text=request.POST.get("text"), typed=True
        )
    except DomainError as exc:
        flash.error(request, exc.message)
        return redirect("memory-page")
    if fact is None:  # memory is off: fact_add stores nothing
        flash.error(
            request,
            "Memory is off, so nothing was remembered. Turn it on above to add facts.",
        )
    else:
        flash.success(request, "Remembered.")
    return redirect("memory-page")


@require_POST
def fact_edit(request: AuthenticatedRequest, fact_id: int) -> HttpResponse:
    """Edit a fact."""
    return _memory_action(
        request,
        lambda: services.fact_update(
            user=request.user, fact_id=fact_id, text=request.POST.get("text")
        ),
        "Memory updated.",
    )


@require_http_methods(["GET", "HEAD", "POST"])
def fact_delete(request: AuthenticatedRequest, fact_id: int) -> HttpResponse:
    """GET: ask for confirmation. POST: forget a fact."""
    if request.method in ("GET", "HEAD"):
        try:
            fact = selectors.fact_get(user=request.user, fact_id=fact_id)
        except DomainError:
            return _not_found(request)
        return _confirm(
            request,
            title="Forget this?",
            message=f"The assistant will no longer remember: “{fact.text}”.",
            action=reverse("fact-delete", args=[fact.id]),
            cancel=reverse("memory-page"),
        )
    return _memory_action(
        request,
        lambda: services.fact_delete(user=request.user, fact_id=fact_id),
        "Forgotten.",
    )


@require_POST
def memory_toggle(request: AuthenticatedRequest) -> HttpResponse:
    """Switch memory on (``enabled=1``) or off."""
    enabled = request.POST.get("enabled") == "1"
    return _memory_action(
        request,
        lambda: services.memory_enabled_set(user=request.user, enabled=enabled),
        "Memory is on." if enabled else "Memory is off.",
    )

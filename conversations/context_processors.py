"""Template context for every page rendered with a request (settings.TEMPLATES)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from conversations.sidebar import sidebar_conversations


def sidebar(request: HttpRequest) -> dict[str, Any]:
    """Give a signed-in user's pages ``sidebar_conversations`` (the sidebar's chat
    list, :func:`conversations.sidebar.sidebar_conversations`, read only when a
    template uses it: one query) and ``sidebar_active_id`` (the conversation the page
    shows, as a string, or ``""``). Nothing for anonymous requests."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    match = getattr(request, "resolver_match", None)
    active = match.kwargs.get("conversation_id", "") if match else ""
    return {
        "sidebar_conversations": SimpleLazyObject(
            lambda: sidebar_conversations(user=user)
        ),
        "sidebar_active_id": str(active),
    }

"""The site's middleware of suspensions: a suspended user's writing requests are
refused before their view runs, except those that end, secure or delete.

A suspended user may read what they have (pages, search, exports) but do nothing that
costs compute or stores content (DESIGN §10): no message, regeneration, edit, upload,
fact, import, feedback, rename or setting. The API refuses them in the gateway
(:func:`safety.selectors.suspension_check` at admission and on embeddings).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from django.utils.decorators import sync_and_async_middleware

from chatsite.errors import DomainError, error_refusal
from safety.selectors import SUSPENDED_ATTR, suspended_now, suspension_check

# The writing URLs a suspended user may still use (URL names): sign out, change the
# password, delete the account, revoke a key, stop an answer, delete what they own.
ALLOWED_WHILE_SUSPENDED = frozenset(
    {
        "login",
        "logout",
        "account-password",
        "account-delete",
        "api-key-revoke",
        "message-stop",
        "conversation-delete",
        "document-delete",
        "fact-delete",
        # the suspension banner offers an appeal of the block that caused it
        "moderation-appeal",
        "moderation-answer-appeal",
    }
)
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def suspended_refusal(request: HttpRequest) -> HttpResponse | None:
    """Return the 403 ``account_suspended`` answer to ``request``
    (:func:`chatsite.errors.error_refusal`) when a suspended, signed-in user writes outside
    :data:`ALLOWED_WHILE_SUSPENDED` and the admin; else None.

    No query when the user was read with their suspension flag
    (:class:`safety.backends.SessionUserBackend`), else one raw query for a signed-in
    user's writing request (:func:`safety.selectors.suspended_now`), none otherwise;
    only a suspended user's request resolves its URL (to find the allowed ones) and
    reads the suspension's row (for its message)."""
    if request.method not in _WRITES or request.path.startswith("/admin/"):
        return None
    user = getattr(request, "user", None)
    if not isinstance(user, User):
        return None
    suspended = getattr(user, SUSPENDED_ATTR, None)  # read with the user
    if suspended is None:
        suspended = suspended_now(user_id=user.pk)
    if not suspended:
        # read in this request: admission's own suspension_check need not query again
        setattr(user, SUSPENDED_ATTR, False)
        return None
    try:
        name = resolve(request.path_info).url_name
    except Resolver404:
        return None
    if name in ALLOWED_WHILE_SUSPENDED:
        return None
    try:
        suspension_check(user=user)
    except DomainError as exc:
        return error_refusal(request, exc)
    return None  # lifted or ended since the probe, a moment ago


@sync_and_async_middleware
def suspended_writes(get_response: Any) -> Any:
    """Answer a suspended user's writing request with :func:`suspended_refusal`
    (after AuthenticationMiddleware). In async mode a writing request hops to a
    thread once (the query); reads pay nothing."""
    if iscoroutinefunction(get_response):

        async def amiddleware(request: HttpRequest) -> HttpResponse:
            if request.method in _WRITES:
                refused = await sync_to_async(suspended_refusal)(request)
                if refused is not None:
                    return refused
            response: HttpResponse = await get_response(request)
            return response

        return amiddleware

    def middleware(request: HttpRequest) -> HttpResponse:
        refused = suspended_refusal(request)
        if refused is not None:
            return refused
        response: HttpResponse = get_response(request)
        return response

    return middleware

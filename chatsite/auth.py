"""The request type of views that only a signed-in user reaches.

``LoginRequiredMiddleware`` (settings MIDDLEWARE) sends an anonymous visitor of any view
not marked ``login_not_required`` to the sign-in page, so such a view's
``request.user`` is always a ``User``. Annotating its request as
:class:`AuthenticatedRequest` says so to the type checker (django-stubs types
``HttpRequest.user`` as ``User | AnonymousUser``); nothing changes at run time.
"""

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest


class AuthenticatedRequest(HttpRequest):
    """An ``HttpRequest`` whose ``user`` is signed in (a view behind the login check)."""

    user: User


def request_user(request: HttpRequest) -> User:
    """Return the signed-in user of a request that passed a login check.

    For code that receives a plain ``HttpRequest`` from Django although only a signed-in
    user can reach it (ModelAdmin methods run behind the admin's staff check). Raises
    PermissionDenied (403) for an anonymous request.
    """
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied
    return user

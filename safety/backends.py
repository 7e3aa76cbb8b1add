"""The site's authentication backend: Django's ModelBackend, whose per-request read of
the signed-in user also reads whether the user is suspended.

Every request of a signed-in user reads the user row (``request.user``), and every
writing one then asked whether a suspension is in force (:mod:`safety.middleware`);
most of an ORM query's cost is Python building its SQL, not PostgreSQL answering it
(bench/results/2026-12-04-turn-profile.md). :meth:`SessionUserBackend.get_user`
reads both in one raw query and leaves the answer on the user object
(:data:`safety.selectors.SUSPENDED_ATTR`) for the middleware and admission. The user
is read per request, never cached: a suspension, a lift, a deactivation or a
password change applies to the user's next request as before.

Sessions remember the path of the backend that signed them in, and Django signs out
one whose backend is not in AUTHENTICATION_BACKENDS; ModelBackend stays listed after
this one so that sessions signed in before keep working (they read the user with its
own query). Passwords are checked by this backend only: a wrong one raises
PermissionDenied, so ModelBackend does not hash it a second time.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.http import HttpRequest
from django.utils import timezone

from safety.models import Suspension
from safety.selectors import SUSPENDED_ATTR

_FIELDS = User._meta.concrete_fields


def _sql() -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(f"u.{quote(str(f.column))}" for f in _FIELDS)
    return (
        f"SELECT {columns}, EXISTS (SELECT 1"
        f" FROM {quote(Suspension._meta.db_table)} s WHERE s.{quote('user_id')} = u.id"
        f" AND s.{quote('lifted_at')} IS NULL AND s.{quote('until')} > %s)"
        f" FROM {quote(User._meta.db_table)} u WHERE u.id = %s"
    )


class SessionUserBackend(ModelBackend):
    """ModelBackend (passwords, permissions, ``is_active``) with :meth:`get_user`
    reading the user and their suspension flag in one query."""

    def get_user(self, user_id: Any) -> User | None:
        """The active user ``user_id`` (the session's id: an int or its text), or
        None; the user object carries ``SUSPENDED_ATTR``: whether a suspension is in
        force now, by the rule of :func:`safety.selectors.suspension_active`."""
        try:
            pk = User._meta.pk.to_python(user_id)
        except ValidationError:
            return None
        with connection.cursor() as cursor:
            cursor.execute(_sql(), [timezone.now(), pk])
            row = cursor.fetchone()
        if row is None:
            return None
        user = User.from_db(
            connection.alias, [f.attname for f in _FIELDS], list(row[:-1])
        )
        setattr(user, SUSPENDED_ATTR, bool(row[-1]))
        return user if self.user_can_authenticate(user) else None

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> User | None:
        """ModelBackend's check; raise PermissionDenied when a username and password
        were given and do not match (the backends after this one are not asked)."""
        user = super().authenticate(request, username, password, **kwargs)
        if user is None and password is not None:
            if username is not None or kwargs.get(User.USERNAME_FIELD) is not None:
                raise PermissionDenied
        return user

"""The site's authentication backend: Django's ModelBackend, whose per-request read of
the signed-in user also reads whether the user is suspended.

Every request of a signed-in user reads the user row (``request.user``), and every
writing one then asked whether a suspension is in force (:mod:`safety.middleware`);
most of an ORM query's cost is Python building its SQL, not PostgreSQL answering it
(bench/results/2026-12-04-turn-profile.md). :meth:`SessionUserBackend.get_user`
reads both in one raw query and leaves the answer on the user object
(:data:`safety.selectors.SUSPENDED_ATTR`) for the middleware and admission. The user
is read per request, never cached: a suspension, a lift, a deactivation or a
password change applies to the user's next request as before. An app above this one
adds a value of its own to that read with :func:`user_read_extend` (the gateway: the
user's subscribed plan), read as fresh as the user row.

Sessions remember the path of the backend that signed them in, and Django signs out
one whose backend is not in AUTHENTICATION_BACKENDS; ModelBackend stays listed after
this one so that sessions signed in before keep working (they read the user with its
own query). Passwords are checked by this backend only: a wrong one raises
PermissionDenied, so ModelBackend does not hash it a second time.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class UserReadColumn:
    """One more value read with the session's user: ``sql``, a scalar SQL expression
    over the user row aliased ``u`` (a subquery; no parameters), left on the user
    object as attribute ``attr``."""

    sql: str
    attr: str


_columns: list[UserReadColumn] = []
_sql_built: dict[tuple[UserReadColumn, ...], str] = {}


def user_read_extend(column: UserReadColumn) -> None:
    """Read ``column`` with every session user from now on (an app's ``ready()``);
    adding the same column again changes nothing."""
    if column not in _columns:
        _columns.append(column)


def _sql(columns: tuple[UserReadColumn, ...]) -> str:
    """The user read's SQL (built once per set of ``columns``): the user's fields, the
    suspension flag, then each column's value. Parameters: now, the user id."""
    built = _sql_built.get(columns)
    if built is not None:
        return built
    quote = connection.ops.quote_name
    fields = ", ".join(f"u.{quote(str(f.column))}" for f in _FIELDS)
    extra = "".join(f", ({c.sql})" for c in columns)
    built = _sql_built[columns] = (
        f"SELECT {fields}, EXISTS (SELECT 1"
        f" FROM {quote(Suspension._meta.db_table)} s WHERE s.{quote('user_id')} = u.id"
        f" AND s.{quote('lifted_at')} IS NULL AND s.{quote('until')} > %s){extra}"
        f" FROM {quote(User._meta.db_table)} u WHERE u.id = %s"
    )
    return built


class SessionUserBackend(ModelBackend):
    """ModelBackend (passwords, permissions, ``is_active``) with :meth:`get_user`
    reading the user and their suspension flag in one query."""

    def get_user(self, user_id: Any) -> User | None:
        """The active user ``user_id`` (the session's id: an int or its text), or
        None; the user object carries ``SUSPENDED_ATTR``: whether a suspension is in
        force now, by the rule of :func:`safety.selectors.suspension_active`, and
        the value of each :func:`user_read_extend` column under its ``attr``."""
        try:
            pk = User._meta.pk.to_python(user_id)
        except ValidationError:
            return None
        columns = tuple(_columns)
        with connection.cursor() as cursor:
            cursor.execute(_sql(columns), [timezone.now(), pk])
            row = cursor.fetchone()
        if row is None:
            return None
        count = len(_FIELDS)
        user = User.from_db(
            connection.alias, [f.attname for f in _FIELDS], list(row[:count])
        )
        setattr(user, SUSPENDED_ATTR, bool(row[count]))
        for column, value in zip(columns, row[count + 1 :], strict=True):
            setattr(user, column.attr, value)
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

"""The reads every chat turn makes about its user before it builds the prompt, in one
SQL round trip: the gateway preferences (default model, cache opt-in) and which memory
sources the prompt should search (facts, documents).

They were two ORM queries (:func:`gateway.selectors.user_preference_get` and
:func:`memory.selectors.memory_sources`, whose rules these are); a turn is the web
tier's hot path, and most of an ORM query's cost is Python building the SQL, not
PostgreSQL answering it (bench/results/2026-12-04-turn-profile.md).

The same values are also read with the session's user (:func:`turn_reads_columns`,
registered by conversations.apps through :func:`safety.backends.user_read_extend`): a
chat turn's POST then reads them with its user, in the query every signed-in request
makes anyway, and :func:`turn_reads` makes no query of its own. They are as fresh as
the user row (read at the request's start, never kept across requests).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS, connection, connections

from gateway.models import UserPreference
from memory.models import Chunk, MemoryFact, MemorySettings
from safety.backends import UserReadColumn

_PREFERENCE_COLUMNS = [f.column for f in UserPreference._meta.concrete_fields]
_PREFERENCE_NAMES = [f.attname for f in UserPreference._meta.concrete_fields]


@dataclass(frozen=True)
class TurnReads:
    """What a turn needs to know about its user.

    ``preference``: the stored :class:`gateway.models.UserPreference`, or an unsaved
    row of defaults (as :func:`gateway.selectors.user_preference_get`);
    ``facts``/``documents``: search the user's facts (memory on and at least one
    fact) / documents (at least one chunk), as :func:`memory.selectors.memory_sources`.
    """

    preference: UserPreference
    facts: bool
    documents: bool

    @property
    def memory_sources(self) -> tuple[bool, bool]:
        """``(facts, documents)``, the shape of :func:`memory.selectors.memory_sources`."""
        return self.facts, self.documents


def _quote(name: str | None) -> str:
    return connection.ops.quote_name(str(name))


def _memory_exists(user: str) -> list[str]:
    """The three memory tests over user id ``user`` (an SQL expression): memory
    switched off, a fact, a document chunk."""
    return [
        f"EXISTS (SELECT 1 FROM {_quote(MemorySettings._meta.db_table)} s"
        f"  WHERE s.user_id = {user} AND NOT s.enabled)",
        f"EXISTS (SELECT 1 FROM {_quote(MemoryFact._meta.db_table)} f"
        f"  WHERE f.user_id = {user})",
        f"EXISTS (SELECT 1 FROM {_quote(Chunk._meta.db_table)} c"
        f"  WHERE c.user_id = {user})",
    ]


@functools.cache
def _sql() -> str:
    """The reads' statement, built once per process (``%(user)s``: the user id)."""
    columns = ", ".join(f"p.{_quote(c)}" for c in _PREFERENCE_COLUMNS)
    return (
        f"SELECT {columns}, {', '.join(_memory_exists('%(user)s'))}"
        f" FROM (SELECT 1) AS one LEFT JOIN {_quote(UserPreference._meta.db_table)} p"
        " ON p.user_id = %(user)s"
    )


# The attribute of the session user's object holding each of :func:`_sql`'s values
# in its order (the preference's columns, then the three memory tests).
_READ_ATTRS = tuple(f"turn_read_{c}" for c in _PREFERENCE_COLUMNS) + (
    "turn_read_memory_off",
    "turn_read_has_facts",
    "turn_read_has_chunks",
)


def turn_reads_columns() -> list[UserReadColumn]:
    """The session user read's columns of :func:`turn_reads`' values (scalar
    subqueries over the user row ``u``; the preference's columns NULL without a
    stored preference)."""
    table = _quote(UserPreference._meta.db_table)
    preference = [
        f"SELECT p.{_quote(c)} FROM {table} p WHERE p.user_id = u.id"
        for c in _PREFERENCE_COLUMNS
    ]
    sql = preference + [f"SELECT {e}" for e in _memory_exists("u.id")]
    return [
        UserReadColumn(sql=q, attr=a) for q, a in zip(sql, _READ_ATTRS, strict=True)
    ]


_UNREAD = object()


def turn_reads(*, user: User) -> TurnReads:
    """Return the :class:`TurnReads` of ``user`` (a saved user): read with the
    session's user (:func:`turn_reads_columns`: no query), else one query, on the
    indexes of each table's ``user_id``."""
    # the wrapper itself, not django.db.connection's proxy (a context-local look-up)
    db = connections[DEFAULT_DB_ALIAS]
    row: Any = [getattr(user, a, _UNREAD) for a in _READ_ATTRS]
    if _UNREAD in row:
        with db.cursor() as cursor:
            cursor.execute(_sql(), {"user": user.pk})
            row = cursor.fetchone()
    width = len(_PREFERENCE_COLUMNS)
    values, (memory_off, has_facts, has_chunks) = row[:width], row[width:]
    if values[0] is None:  # no stored preference: the defaults
        preference = UserPreference(user_id=user.pk)
    else:
        preference = UserPreference.from_db(db.alias, _PREFERENCE_NAMES, list(values))
    return TurnReads(
        preference=preference,
        facts=bool(has_facts) and not memory_off,
        documents=bool(has_chunks),
    )

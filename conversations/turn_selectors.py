"""The reads every chat turn makes about its user before it builds the prompt, in one
SQL round trip: the gateway preferences (default model, cache opt-in) and which memory
sources the prompt should search (facts, documents).

They were two ORM queries (:func:`gateway.selectors.user_preference_get` and
:func:`memory.selectors.memory_sources`, whose rules these are); a turn is the web
tier's hot path, and most of an ORM query's cost is Python building the SQL, not
PostgreSQL answering it (bench/results/2026-12-04-turn-profile.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS, connection, connections

from gateway.models import UserPreference
from memory.models import Chunk, MemoryFact, MemorySettings

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


@functools.cache
def _sql() -> str:
    """The reads' statement, built once per process (``%(user)s``: the user id)."""

    def quote(name: str | None) -> str:
        return connection.ops.quote_name(str(name))

    columns = ", ".join(f"p.{quote(c)}" for c in _PREFERENCE_COLUMNS)
    return (
        f"SELECT {columns},"
        f" EXISTS (SELECT 1 FROM {quote(MemorySettings._meta.db_table)} s"
        "  WHERE s.user_id = %(user)s AND NOT s.enabled),"
        f" EXISTS (SELECT 1 FROM {quote(MemoryFact._meta.db_table)} f"
        "  WHERE f.user_id = %(user)s),"
        f" EXISTS (SELECT 1 FROM {quote(Chunk._meta.db_table)} c"
        "  WHERE c.user_id = %(user)s)"
        f" FROM (SELECT 1) AS one LEFT JOIN {quote(UserPreference._meta.db_table)} p"
        " ON p.user_id = %(user)s"
    )


def turn_reads(*, user: User) -> TurnReads:
    """Return the :class:`TurnReads` of ``user`` (a saved user): one query, on the
    indexes of each table's ``user_id``."""
    # the wrapper itself, not django.db.connection's proxy (a context-local look-up)
    db = connections[DEFAULT_DB_ALIAS]
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

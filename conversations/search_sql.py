"""The SQL of the full-text search columns (migration 0006, ``search_config_apply``).

``conversations_message.search_vector`` and ``conversations_conversation.search_vector``
are ``GENERATED ALWAYS AS (to_tsvector(<config>, <text>)) STORED``
columns: PostgreSQL recomputes them on every insert and update, so no write path
(a turn, an answer finishing its stream, a rename, an import, the admin, a raw
``update()``) can leave them stale. A generated column's expression must be constant,
so the text-search configuration is fixed when the column is made, from the setting
CHAT_SEARCH_CONFIG; queries use the same setting (conversations.search).
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# (table, text column, GIN index name) of each searchable text.
SEARCH_COLUMNS = (
    ("conversations_message", "content", "msg_search_gin"),
    ("conversations_conversation", "title", "conv_search_gin"),
)
_CONFIG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def search_config(*, connection: Any) -> str:
    """Return CHAT_SEARCH_CONFIG after checking that PostgreSQL has that text-search
    configuration (``pg_ts_config``); raise ImproperlyConfigured otherwise.

    The name goes into DDL as a literal (a generated column takes no parameters), so
    only a plain identifier is accepted.
    """
    name = settings.CHAT_SEARCH_CONFIG
    if not isinstance(name, str) or not _CONFIG_NAME.match(name):
        raise ImproperlyConfigured(
            f"CHAT_SEARCH_CONFIG {name!r} is not a text-search configuration name."
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_ts_config WHERE cfgname = %s", [name])
        if cursor.fetchone() is None:
            raise ImproperlyConfigured(
                f"PostgreSQL has no text-search configuration {name!r} "
                "(CHAT_SEARCH_CONFIG); `SELECT cfgname FROM pg_ts_config` lists them."
            )
    return name


def vector_sql(*, column: str, config: str) -> str:
    """Return the generated column's expression for ``column`` under ``config``.

    ``<`` and ``>`` are read as spaces: PostgreSQL's parser takes ``<...>`` for an
    HTML tag and drops it whole, so code pasted into a chat (``<div class="nav">``)
    would otherwise not be found by its words.
    """
    return (
        f"to_tsvector('{config}'::regconfig, "
        f"translate(coalesce({column}, ''), '<>', '  '))"
    )


def columns_add_sql(*, config: str) -> list[str]:
    """Return the statements that add both search columns and their GIN indexes."""
    statements = []
    for table, column, index in SEARCH_COLUMNS:
        statements.append(
            f"ALTER TABLE {table} ADD COLUMN search_vector tsvector "
            f"GENERATED ALWAYS AS ({vector_sql(column=column, config=config)}) STORED"
        )
        statements.append(f"CREATE INDEX {index} ON {table} USING gin (search_vector)")
    return statements


def columns_drop_sql() -> list[str]:
    """Return the statements that drop both search columns (and so their indexes)."""
    return [
        f"ALTER TABLE {table} DROP COLUMN search_vector"
        for table, _column, _index in SEARCH_COLUMNS
    ]


def columns_reconfigure_sql(*, config: str) -> list[str]:
    """Return the statements that regenerate both columns under ``config``
    (PostgreSQL 17+ ``SET EXPRESSION``: rewrites each table and its index)."""
    return [
        f"ALTER TABLE {table} ALTER COLUMN search_vector SET EXPRESSION AS "
        f"({vector_sql(column=column, config=config)})"
        for table, column, _index in SEARCH_COLUMNS
    ]


def columns_config(*, connection: Any) -> dict[str, str]:
    """Return ``{table: expression}`` of the search columns as the database has them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d "
            "JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
            "JOIN pg_class c ON c.oid = d.adrelid "
            "WHERE a.attname = 'search_vector' AND c.relname = ANY(%s)",
            [[table for table, _c, _i in SEARCH_COLUMNS]],
        )
        return dict(cursor.fetchall())

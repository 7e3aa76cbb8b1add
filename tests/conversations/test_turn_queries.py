"""The database round trips of a chat turn's POST (issue 13: what the turn path costs).

A first message without memory, as a new user sends it: the user (the session is read
from the cache) with their suspension flag, plan, preferences and memory sources in
one query, then the conversation inserted with its current leaf and both messages in
one statement, which needs no transaction around it outside a test's own (no update
of the conversation)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("pool_heartbeat")]


def test_a_first_turn_reads_each_thing_once_and_writes_without_savepoints(
    settings, auth_client
):
    settings.GATEWAY_CONFIG_CACHE_S = 60.0  # pools and plans: cached per process
    url = reverse("message-send-new")
    assert (
        auth_client.post(url, {"content": "warm the config cache"}).status_code == 201
    )
    with CaptureQueriesContext(connection) as queries:
        response = auth_client.post(url, {"content": "How are you?"})
    assert response.status_code == 201
    sql = [q["sql"] for q in queries.captured_queries]
    tables = [
        t
        for t in ("memory_memorysettings", "memory_memoryfact", "memory_chunk")
        if any(t in s for s in sql)
    ]
    assert sum('FROM "memory_' in s for s in sql) == 1, sql  # one for all three
    assert len(tables) == 3, sql
    # the preferences in that same query (the user's)
    assert [s for s in sql if "gateway_userpreference" in s] == [
        s for s in sql if 'FROM "memory_' in s
    ], sql
    assert not any("django_session" in s for s in sql), sql  # cached_db: a cache hit
    # one statement, its own transaction in autocommit (test_turn_first_write.py); the
    # test's own transaction makes the lifecycle's durable one a savepoint here
    assert sum(s.startswith("SAVEPOINT") for s in sql) == 1, sql
    assert not any('SET "doc_scope"' in s for s in sql), sql
    # the conversation and both messages in one statement
    inserts = [s for s in sql if "INSERT INTO" in s]
    assert len(inserts) == 1, inserts
    assert 'INSERT INTO "conversations_conversation"' in inserts[0]
    assert 'INSERT INTO "conversations_message"' in inserts[0]
    assert not any(s.startswith('UPDATE "conversations_conversation"') for s in sql)
    # the suspension flag read with the user (safety.backends): no query of its own
    suspension = [s for s in sql if "safety_suspension" in s]
    assert len(suspension) == 1 and 'FROM "auth_user"' in suspension[0], sql
    # the preferences and memory sources read with the user too: the user read, then
    # the INSERT (within its savepoint here)
    assert "gateway_userpreference" in suspension[0], suspension
    assert [s.split()[0] for s in sql] == ["SELECT", "SAVEPOINT", "WITH", "RELEASE"], (
        sql
    )

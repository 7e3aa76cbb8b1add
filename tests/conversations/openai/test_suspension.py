"""A suspended user on the API: an OpenAI-shaped 403 ``account_suspended`` naming when
the suspension ends, from the same admission as the chat page; nothing spent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from conversations.openai import schemas
from inference.engines.scripted import ScriptedEngine
from safety import suspensions
from tests.conversations.openai.helpers import asgi, ask, no_reservations

pytestmark = pytest.mark.django_db(transaction=True)


async def _suspend(user, until) -> None:
    await sync_to_async(suspensions.suspension_create)(
        user=user, until=until, reason="Repeated abuse", actor=None, actor_label="t"
    )


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", ask()),
        ("/v1/chat/completions", ask(stream=True)),
        ("/v1/embeddings", {"model": "all-MiniLM-L6-v2", "input": ["hi"]}),
    ],
)
async def test_a_suspended_user_gets_an_openai_shaped_403_naming_the_end(
    user, api_key, enqueued, path, body
):
    await _suspend(user, datetime(2099, 5, 6, 7, 8, tzinfo=UTC))
    result = await asgi("POST", path, body=body, key=api_key)
    assert result.status == 403
    schemas.validate_error(result.json())
    error = result.json()["error"]
    assert error["code"] == "account_suspended"
    assert error["type"] == "permission_error"
    assert "2099-05-06 07:08 UTC" in error["message"]
    assert "Repeated abuse" in error["message"]
    assert enqueued == [] and no_reservations()


async def test_an_ended_suspension_no_longer_blocks_the_api(
    user, api_key, start_worker
):
    await _suspend(user, timezone.now() - timedelta(seconds=1))
    start_worker(ScriptedEngine())
    result = await asgi("POST", "/v1/chat/completions", body=ask(), key=api_key)
    assert result.status == 200

"""gateway/tooling.py: search_documents searches the user's own documents, within
the conversation's document scope; another user's documents are never returned."""

from __future__ import annotations

import pytest

from gateway.tooling import SEARCH_DOCUMENTS
from memory import services as memory_services
from tests.conftest import make_user
from tests.tools.conftest import _async_orm_connections_closed  # noqa: F401
from tools.registry import ToolContext, registered_tools, tool_run

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("embedding_worker"),
]

HERON = "Project Heron launches on 14 March. The budget owner is Dana Whitfield."
GARDEN = "The tomatoes in the garden need watering every morning in July."
SECRET = "Project Heron's secret launch code is 7781, known to Mallory only."


def upload(user, name, text):
    doc = memory_services.document_upload(
        user=user, name=name, data=text.encode(), ingest_on_commit=False
    )
    return memory_services.document_ingest(document_id=doc.id)


@pytest.fixture
def library(user):
    mallory = make_user("mallory")
    return {
        "heron": upload(user, "heron.txt", HERON),
        "garden": upload(user, "garden.txt", GARDEN),
        "secret": upload(mallory, "secret.txt", SECRET),
    }


def test_search_documents_is_registered_at_ready():
    assert SEARCH_DOCUMENTS in registered_tools()


async def test_passages_come_from_the_users_documents_only(user, library):
    result = await tool_run(
        SEARCH_DOCUMENTS,
        arguments={"query": "When does Project Heron launch?"},
        context=ToolContext(user_id=user.id),
    )
    assert not result.error, result.text
    ids = {p["document_id"] for p in result.detail["passages"]}
    assert library["heron"].id in ids
    assert library["secret"].id not in ids
    assert "7781" not in result.text
    assert "14 March" in result.text
    label = SEARCH_DOCUMENTS.label({}, result)
    assert label == f"Read {len(ids)} passage{'' if len(ids) == 1 else 's'}"


async def test_the_conversations_scope_limits_the_search(user, library):
    garden_only = ToolContext(user_id=user.id, document_ids=(library["garden"].id,))
    result = await tool_run(
        SEARCH_DOCUMENTS,
        arguments={"query": "When does Project Heron launch?"},
        context=garden_only,
    )
    ids = {p["document_id"] for p in result.detail.get("passages", [])}
    assert ids <= {library["garden"].id}
    assert "14 March" not in result.text
    # Another user's document named in the scope is still not searched.
    forged = ToolContext(user_id=user.id, document_ids=(library["secret"].id,))
    result = await tool_run(
        SEARCH_DOCUMENTS, arguments={"query": "secret launch code"}, context=forged
    )
    assert "7781" not in result.text
    assert result.detail.get("passages", []) == []
    none = ToolContext(user_id=user.id, document_ids=())
    result = await tool_run(
        SEARCH_DOCUMENTS, arguments={"query": "Heron"}, context=none
    )
    assert result.text == "No passage of the user's documents matches."

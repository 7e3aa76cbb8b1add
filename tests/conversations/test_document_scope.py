"""A conversation's document scope (issue 11): all / none / chosen documents, set
with the first message or on the conversation (owner-checked), honoured by retrieval;
and the title endpoint the chat page polls."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from conversations import services
from conversations.models import Conversation, DocumentScope, Message
from memory import services as memory_services
from memory.models import Citation

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("pool_heartbeat")]

BEES = "Hive two swarmed in May; the bees of hive two now live in the old apple tree."
TRAINS = "The night train to Vienna leaves Munich at 23:15 from platform 11."


def upload(user, name, text):
    doc = memory_services.document_upload(
        user=user, name=name, data=text.encode(), ingest_on_commit=False
    )
    return memory_services.document_ingest(document_id=doc.id)


def cited_titles(turn) -> set[str]:
    return set(
        Citation.objects.filter(message_id=turn.assistant_message.id).values_list(
            "chunk__document__title", flat=True
        )
    )


@pytest.fixture
def docs(user, embedding_worker):
    return upload(user, "bees.md", BEES), upload(user, "trains.md", TRAINS)


@pytest.fixture
def chat(user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return services.turn_start(user=user, content="Hello")


def ask(user, conversation, text, **scope):
    Message.objects.filter(conversation=conversation).update(status="complete")
    return services.turn_start(
        user=user, conversation_id=conversation.id, content=text, **scope
    )


def test_a_new_chat_searches_all_documents_by_default(user, docs):
    turn = services.turn_start(user=user, content="Where do the bees of hive two live?")
    assert turn.conversation.doc_scope == DocumentScope.ALL
    assert cited_titles(turn) == {"bees.md"}


def test_scope_none_sent_with_the_first_message_cites_nothing_and_is_kept(user, docs):
    turn = services.turn_start(
        user=user, content="Where do the bees of hive two live?", doc_scope="none"
    )
    assert cited_titles(turn) == set()
    assert Conversation.objects.get(id=turn.conversation.id).doc_scope == "none"
    again = ask(user, turn.conversation, "And the bees of hive two, where are they?")
    assert cited_titles(again) == set()  # the stored scope holds for later turns


def test_scope_some_searches_only_the_chosen_documents(user, docs):
    bees, trains = docs
    turn = services.turn_start(
        user=user,
        content="Where do the bees of hive two live?",
        doc_scope="some",
        document_ids=[str(trains.id)],
    )
    assert "bees.md" not in cited_titles(turn)
    turn = ask(
        user,
        turn.conversation,
        "When does the night train to Vienna leave Munich?",
    )
    assert cited_titles(turn) == {"trains.md"}


def test_the_scope_endpoint_stores_the_choice_for_the_next_turn(
    user, auth_client, docs, chat
):
    bees, _ = docs
    url = reverse("conversation-documents", args=[chat.conversation.id])
    response = auth_client.post(
        url,
        {"doc_scope": "some", "documents": [bees.id]},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 200
    assert response.json()["doc_scope"] == "some"
    assert response.json()["documents"] == [bees.id]
    turn = ask(user, chat.conversation, "When does the night train to Vienna leave?")
    assert "trains.md" not in cited_titles(turn)
    response = auth_client.post(url, {"doc_scope": "none"})
    assert response.status_code == 302  # POST-redirect-GET for the form post
    assert Conversation.objects.get(id=chat.conversation.id).doc_scope == "none"


def test_another_users_document_is_a_404_and_stores_nothing(
    user, other_user, auth_client, chat
):
    theirs = memory_services.document_upload(
        user=other_user, name="theirs.md", data=b"secret", ingest_on_commit=False
    )
    url = reverse("conversation-documents", args=[chat.conversation.id])
    response = auth_client.post(
        url,
        {"doc_scope": "some", "documents": [theirs.id]},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 404
    assert "does not exist" in response.json()["error"]["message"]
    conversation = Conversation.objects.get(id=chat.conversation.id)
    assert conversation.doc_scope == "all"
    assert not conversation.scope_documents.exists()
    # and sent with a message: nothing is stored, no message either
    before = Message.objects.count()
    response = auth_client.post(
        reverse("message-send-new"),
        {"content": "hi", "doc_scope": "some", "documents": [theirs.id]},
    )
    assert response.status_code == 404
    assert Message.objects.count() == before


def test_another_users_conversation_scope_and_title_are_404(other_user, chat, client):
    client.force_login(other_user)
    url = reverse("conversation-documents", args=[chat.conversation.id])
    assert client.post(url, {"doc_scope": "none"}).status_code == 404
    title = reverse("conversation-title", args=[chat.conversation.id])
    assert client.get(title).status_code == 404
    assert Conversation.objects.get(id=chat.conversation.id).doc_scope == "all"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"doc_scope": "everything"}, "invalid_scope"),
        ({}, "invalid_scope"),
        ({"doc_scope": "some"}, "empty_scope"),
        ({"doc_scope": "some", "documents": ["x"]}, "invalid_scope"),
    ],
)
def test_a_bad_scope_is_a_clear_400(auth_client, chat, fields, code):
    url = reverse("conversation-documents", args=[chat.conversation.id])
    response = auth_client.post(url, fields, HTTP_ACCEPT="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"]


def test_the_scope_endpoint_needs_csrf(user, chat):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    url = reverse("conversation-documents", args=[chat.conversation.id])
    assert client.post(url, {"doc_scope": "none"}).status_code == 403


def test_the_title_endpoint_returns_the_current_title(auth_client, chat):
    url = reverse("conversation-title", args=[chat.conversation.id])
    assert json.loads(auth_client.get(url).content) == {
        "id": str(chat.conversation.id),
        "title": "Hello",
    }
    Conversation.objects.filter(id=chat.conversation.id).update(title="Greetings")
    assert auth_client.get(url).json()["title"] == "Greetings"


def test_the_chat_page_shows_the_scope_menu_with_the_ready_documents(
    user, auth_client, docs, chat
):
    bees, _ = docs
    services.conversation_scope_set(
        user=user,
        conversation_id=chat.conversation.id,
        kind="some",
        document_ids=[bees.id],
    )
    page = auth_client.get(reverse("conversation-detail", args=[chat.conversation.id]))
    html = page.content.decode()
    assert 'id="doc-scope"' in html
    assert (
        '<span class="picker-name">Documents:</span> '
        '<span class="doc-scope-label picker-chip">1 chosen</span>'
    ) in html
    assert f'name="documents" value="{bees.id}" checked' in html
    assert 'name="doc_scope" value="some" checked' in html

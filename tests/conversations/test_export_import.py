"""Export (JSON, Markdown; one conversation or all) and import (our JSON round trip,
ChatGPT's conversations.json, bad files), services and views, against the real
database (conversations/exports.py, conversations/services/imports/)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from chatsite.errors import InvalidInput, PayloadTooLarge
from conversations import exports, services
from conversations.models import Conversation, Feedback, Message
from gateway.models import UsageRecord
from memory.models import Chunk, Citation, Document

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2025, 3, 4, 10, 0, 0, 123456, tzinfo=dt.UTC)


@pytest.fixture
def thread(user):
    """A conversation of ``user``: a question with two answer versions (the first
    rated down, the second citing a passage of the user's document), a follow-up
    question and its answer."""
    conv = Conversation.objects.create(
        user=user,
        title="Capitals <of> Europe",
        created_at=T0,
        updated_at=T0 + dt.timedelta(minutes=5),
    )
    q1 = Message.objects.create(
        conversation=conv, role="user", content="Capital of France?", created_at=T0
    )
    a1 = Message.objects.create(
        conversation=conv,
        role="assistant",
        parent=q1,
        content="Lyon.",
        model="tiny-1",
        pool="small",
        token_count=3,
        prompt_tokens=40,
        cached_tokens=8,
        ttft_ms=120,
        latency_ms=300,
        finish_reason="stop",
        created_at=T0 + dt.timedelta(seconds=1),
    )
    a2 = Message.objects.create(
        conversation=conv,
        role="assistant",
        parent=q1,
        content="Paris [1].",
        model="large-1",
        finish_reason="stop",
        token_count=4,
        created_at=T0 + dt.timedelta(seconds=30),
    )
    q2 = Message.objects.create(
        conversation=conv,
        role="user",
        parent=a2,  # a question follows the answer shown above it (the tree model)
        content="And of Italy?",
        created_at=T0 + dt.timedelta(minutes=1),
    )
    a3 = Message.objects.create(
        conversation=conv,
        role="assistant",
        parent=q2,
        content="Rome, stopped",
        status="cancelled",
        finish_reason="cancelled",
        created_at=T0 + dt.timedelta(minutes=1, seconds=2),
    )
    conv.current_leaf = a3
    conv.save(update_fields=["current_leaf"])
    Feedback.objects.create(
        user=user,
        message=a1,
        rating="down",
        reason="wrong",
        comment="Not Lyon",
        model="tiny-1",
        created_at=T0 + dt.timedelta(seconds=5),
        updated_at=T0 + dt.timedelta(seconds=6),
    )
    document = Document.objects.create(
        user=user, title="Atlas", content_type="txt", status="ready"
    )
    chunk = Chunk.objects.create(
        document=document,
        user=user,
        ord=2,
        text="Paris is the capital of France.",
        start_char=0,
        end_char=31,
        embedding=[1.0] + [0.0] * 383,
    )
    Citation.objects.create(message=a2, chunk=chunk, number=1)
    return conv, [q1, a1, a2, q2, a3]


def export(client, conv=None, kind="json"):
    url = (
        reverse("conversation-export", args=[conv.id])
        if conv
        else reverse("conversations-export")
    )
    return client.get(url, {"format": kind})


def upload(client, data: bytes, name="export.json"):
    return client.post(
        reverse("conversations-import"),
        {"file": SimpleUploadedFile(name, data, content_type="application/json")},
        follow=True,
    )


def shape(conversation):
    """The messages as comparable tuples, in stored order, parents by position."""
    messages = list(conversation.messages.order_by("created_at", "id"))
    index = {m.id: i for i, m in enumerate(messages)}
    return [
        (
            index.get(m.parent_id),
            m.role,
            m.content,
            m.status,
            m.model,
            m.created_at,
            m.finish_reason,
            m.token_count,
            m.prompt_tokens,
            m.cached_tokens,
            m.ttft_ms,
            m.latency_ms,
        )
        for m in messages
    ]


# --- export -------------------------------------------------------------------------


def test_json_export_carries_every_branch_feedback_and_citations(auth_client, thread):
    conv, (q1, a1, a2, _q2, a3) = thread
    response = export(auth_client, conv)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    assert response["Content-Disposition"].startswith("attachment; filename=")
    assert "chat-capitals-of-europe-" in response["Content-Disposition"]
    data = json.loads(response.content)
    assert data["format"] == exports.EXPORT_FORMAT and data["version"] == 1
    (item,) = data["conversations"]
    assert item["title"] == "Capitals <of> Europe"
    assert item["created_at"] == T0.isoformat()
    messages = item["messages"]
    assert [m["id"] for m in messages] == [str(m.id) for m in (q1, a1, a2, _q2, a3)]
    first = messages[1]
    assert first["parent_id"] == str(q1.id)
    assert first["created_at"] == "2025-03-04T10:00:01.123456+00:00"
    assert (first["token_count"], first["prompt_tokens"], first["ttft_ms"]) == (
        3,
        40,
        120,
    )
    assert first["feedback"]["rating"] == "down"
    assert first["feedback"]["comment"] == "Not Lyon"
    assert messages[2]["citations"] == [
        {
            "number": 1,
            "chunk_id": a2.citations.get().chunk_id,
            "document_id": a2.citations.get().chunk.document_id,
            "document_title": "Atlas",
            "passage": 3,
        }
    ]
    assert messages[4]["status"] == "cancelled"


def test_markdown_export_is_the_displayed_thread_with_times_and_models(
    auth_client, thread
):
    conv, _messages = thread
    response = export(auth_client, conv, "md")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/markdown")
    assert ".md" in response["Content-Disposition"]
    text = response.content.decode()
    assert text.startswith("# Capitals <of> Europe\n")
    assert "### You · 2025-03-04 10:00 UTC\n\nCapital of France?" in text
    assert "### Assistant · 2025-03-04 10:00 UTC · large-1\n\nParis [1]." in text
    assert "Lyon." not in text  # an earlier version, not the displayed one
    assert "### Assistant · 2025-03-04 10:01 UTC · stopped\n\nRome, stopped" in text
    assert text.index("Capital of France?") < text.index("And of Italy?")


def test_export_of_all_conversations_as_one_file(auth_client, user, thread):
    Conversation.objects.create(user=user, title="Second chat")
    data = json.loads(export(auth_client).content)
    assert {c["title"] for c in data["conversations"]} == {
        "Capitals <of> Europe",
        "Second chat",
    }
    md = export(auth_client, kind="md")
    assert md["Content-Disposition"].startswith('attachment; filename="chats-')
    assert "# Second chat" in md.content.decode()
    assert "# Capitals <of> Europe" in md.content.decode()


def test_export_of_another_users_conversation_is_a_404(thread, other_user):
    conv, _ = thread
    client = Client()
    client.force_login(other_user)
    assert export(client, conv).status_code == 404
    assert export(client, conv, "md").status_code == 404
    assert json.loads(export(client).content)["conversations"] == []


def test_export_with_an_unknown_format_is_a_400_page_or_json_as_asked(
    auth_client, thread
):
    conv, _ = thread
    url = reverse("conversation-export", args=[conv.id])
    page = auth_client.get(url, {"format": "pdf"}, headers={"Accept": "text/html"})
    assert page.status_code == 400
    assert page["Content-Type"].startswith("text/html")
    assert "Choose an export format" in page.content.decode()
    asked = auth_client.get(
        url, {"format": "pdf"}, headers={"Accept": "application/json"}
    )
    assert asked.status_code == 400
    assert "json" in asked.json()["error"]["message"]


# --- import: our own format -----------------------------------------------------------


def test_round_trip_gives_the_same_messages_parents_times_and_order(
    auth_client, user, thread
):
    conv, _messages = thread
    data = export(auth_client, conv).content
    response = upload(auth_client, data)
    assert response.status_code == 200
    copy = Conversation.objects.exclude(id=conv.id).get(user=user)
    assert response.redirect_chain[-1][0] == f"/c/{copy.id}/"
    assert "Imported 1 conversation." in response.content.decode()
    assert copy.title == f"{conv.title} (imported)"  # the user has the original
    assert (copy.created_at, copy.updated_at) == (conv.created_at, conv.updated_at)
    assert shape(copy) == shape(conv)
    assert not set(copy.messages.values_list("id", flat=True)) & set(
        conv.messages.values_list("id", flat=True)
    )
    feedback = Feedback.objects.get(message__conversation=copy)
    assert (feedback.user, feedback.rating, feedback.reason, feedback.comment) == (
        user,
        "down",
        "wrong",
        "Not Lyon",
    )
    assert feedback.message.content == "Lyon."
    citation = Citation.objects.get(message__conversation=copy)
    assert citation.message.content == "Paris [1]." and citation.number == 1
    assert UsageRecord.objects.count() == 0  # not billed
    # exporting the copy gives the same document apart from ids
    again = exports.conversations_export_json(user=user, conversation_id=copy.id)
    original = json.loads(data)["conversations"][0]
    strip = {"id", "parent_id", "chunk_id"}

    def without_ids(messages):
        return [
            {k: v for k, v in m.items() if k not in strip}
            | {
                "citations": [
                    {k: v for k, v in c.items() if k not in strip}
                    for c in m["citations"]
                ]
            }
            for m in messages
        ]

    assert without_ids(again["conversations"][0]["messages"]) == without_ids(
        original["messages"]
    )


def test_import_belongs_to_the_importer_and_drops_citations_of_others(
    auth_client, thread, other_user
):
    conv, _ = thread
    data = export(auth_client, conv).content
    client = Client()
    client.force_login(other_user)
    upload(client, data)
    copy = Conversation.objects.get(user=other_user)
    assert copy.title == conv.title  # the first of that title for this user
    assert copy.messages.count() == 5
    assert not Citation.objects.filter(message__conversation=copy).exists()
    assert Feedback.objects.get(message__conversation=copy).user == other_user
    # the original owner does not see the copy
    assert Conversation.objects.filter(user=conv.user).count() == 1


def titled_export(user, *titles):
    """An export file of ``user``'s new conversations titled ``titles`` (one message
    each); the conversations are deleted again unless the title starts with "keep"."""
    convs = [Conversation.objects.create(user=user, title=t) for t in titles]
    for conv in convs:
        Message.objects.create(conversation=conv, role="user", content="Hi")
    data = json.dumps(exports.conversations_export_json(user=user)).encode()
    Conversation.objects.filter(id__in=[c.id for c in convs]).exclude(
        title__startswith="keep"
    ).delete()
    return data


def test_an_imported_copy_of_a_title_the_user_has_is_marked_imported(user):
    data = titled_export(user, "keep Trip plans", "Recipes", "Recipes")
    titles = [
        c.title
        for c in services.conversations_import(user=user, data=data).conversations
    ]
    # newest first in the export; repeated titles within one file are kept
    assert sorted(titles) == ["Recipes", "Recipes", "keep Trip plans (imported)"]
    again = services.conversations_import(user=user, data=data).conversations
    assert sorted(c.title for c in again) == [
        "Recipes (imported)",
        "Recipes (imported)",
        "keep Trip plans (imported)",
    ]


def test_a_long_title_marked_imported_stays_within_200_characters(user):
    long_title = "keep " + "word " * 60
    data = titled_export(user, long_title[:200].strip())
    (copy,) = services.conversations_import(user=user, data=data).conversations
    assert len(copy.title) <= 200 and copy.title.endswith(" (imported)")
    assert copy.title.startswith("keep word word")


def test_another_users_titles_do_not_mark_an_import(user, other_user):
    Conversation.objects.create(user=other_user, title="Shared name")
    data = titled_export(user, "Shared name")
    (copy,) = services.conversations_import(user=user, data=data).conversations
    assert copy.title == "Shared name"


def test_a_streaming_message_is_imported_as_stopped(user):
    conv = Conversation.objects.create(user=user, title="Live")
    q = Message.objects.create(conversation=conv, role="user", content="Hi")
    Message.objects.create(
        conversation=conv, role="assistant", parent=q, status="streaming"
    )
    data = json.dumps(exports.conversations_export_json(user=user)).encode()
    (copy,) = services.conversations_import(user=user, data=data).conversations
    assert set(copy.messages.values_list("status", flat=True)) == {
        "complete",
        "cancelled",
    }


# --- import: ChatGPT ---------------------------------------------------------------------

# A hand-written ChatGPT export (the shape of a real conversations.json): a hidden
# system node, a branch (the second question edited), a tool call between the
# edited question and its answer, an answer split around a tool call, and a
# second conversation with an image part and a message without a time.
BASE = 1_700_000_000.5


def node(node_id, parent, children, role=None, text=None, **extra):
    message = None
    if role is not None:
        content_type = extra.pop("content_type", "text")
        message = {
            "id": node_id,
            "author": {"role": role, "name": None, "metadata": {}},
            "create_time": extra.pop("create_time", None),
            "update_time": None,
            "content": {
                "content_type": content_type,
                "parts": extra.pop("parts", [text]),
            },
            "status": "finished_successfully",
            "end_turn": True,
            "weight": 1.0,
            "metadata": extra.pop("metadata", {}),
            "recipient": extra.pop("recipient", "all"),
        }
    return {"id": node_id, "message": message, "parent": parent, "children": children}


CHATGPT_SAMPLE = [
    {
        "title": "Cold brew coffee",
        "create_time": BASE,
        "update_time": BASE + 100,
        "current_node": "a2b",
        "conversation_id": "6f1c0d2e-1111-4a2b-9c3d-000000000001",
        "mapping": {
            "root": node("root", None, ["sys"]),
            "sys": node(
                "sys",
                "root",
                ["u1"],
                "system",
                "",
                metadata={"is_visually_hidden_from_conversation": True},
            ),
            "u1": node(
                "u1",
                "sys",
                ["a1"],
                "user",
                "How do I make cold brew?",
                create_time=BASE + 10,
            ),
            "a1": node(
                "a1",
                "u1",
                ["u2", "u2b"],
                "assistant",
                "Steep coarse grounds in cold water for 12-18 hours.",
                create_time=BASE + 12,
                metadata={"model_slug": "gpt-4o", "finish_details": {"type": "stop"}},
            ),
            "u2": node(
                "u2", "a1", ["a2"], "user", "What ratio?", create_time=BASE + 30
            ),
            "a2": node(
                "a2",
                "u2",
                [],
                "assistant",
                "About 1:8 coffee to water.",
                create_time=BASE + 31,
                metadata={"model_slug": "gpt-4o"},
            ),
            "u2b": node(
                "u2b", "a1", ["call"], "user", "What grind size?", create_time=BASE + 60
            ),
            "call": node(
                "call",
                "u2b",
                ["tool"],
                "assistant",
                None,
                content_type="code",
                parts=None,
                recipient="python",
                create_time=BASE + 61,
            ),
            "tool": node(
                "tool",
                "call",
                ["a2b"],
                "tool",
                "ok",
                content_type="execution_output",
                create_time=BASE + 62,
            ),
            "a2b": node(
                "a2b",
                "tool",
                ["a2c"],
                "assistant",
                "A coarse grind, like sea salt.",
                create_time=BASE + 65,
                metadata={"model_slug": "gpt-4o-mini"},
            ),
            "a2c": node(
                "a2c",
                "a2b",
                [],
                "assistant",
                "It filters more easily.",
                create_time=BASE + 66,
                metadata={"finish_details": {"type": "max_tokens"}},
            ),
        },
    },
    {
        "title": "A picture",
        "create_time": BASE + 1000,
        "update_time": None,
        "current_node": "pa",
        "mapping": {
            "p0": node("p0", None, ["pu"]),
            "pu": node(
                "pu",
                "p0",
                ["pimg"],
                "user",
                None,
                content_type="multimodal_text",
                parts=[{"content_type": "image_asset_pointer"}, "What is this?"],
                create_time=BASE + 1001,
            ),
            "pimg": node("pimg", "pu", ["pq"], "user", "", create_time=BASE + 1002),
            "pq": node("pq", "pimg", ["pa"], "user", "Describe the photo please"),
            "pa": node(
                "pa",
                "pq",
                [],
                "assistant",
                "It shows a <cat> on a mat.",
                create_time=BASE + 1005,
            ),
        },
    },
]


def test_chatgpt_import_keeps_text_tree_times_and_skips_the_rest(auth_client, user):
    response = upload(
        auth_client, json.dumps(CHATGPT_SAMPLE).encode(), "conversations.json"
    )
    assert response.status_code == 200
    assert "Imported 2 conversations." in response.content.decode()
    coffee = Conversation.objects.get(user=user, title="Cold brew coffee")
    when = dt.datetime.fromtimestamp
    assert coffee.created_at == when(BASE, tz=dt.UTC)
    assert coffee.updated_at == when(BASE + 100, tz=dt.UTC)
    messages = {m.content: m for m in coffee.messages.all()}
    assert set(messages) == {
        "How do I make cold brew?",
        "Steep coarse grounds in cold water for 12-18 hours.",
        "What ratio?",
        "About 1:8 coffee to water.",
        "What grind size?",
        "A coarse grind, like sea salt.\n\nIt filters more easily.",
    }

    def parent(text):
        p = messages[text].parent
        return p.content if p else None

    assert parent("How do I make cold brew?") is None  # hidden system node skipped
    answer = "Steep coarse grounds in cold water for 12-18 hours."
    assert parent(answer) == "How do I make cold brew?"
    assert parent("What ratio?") == answer
    assert parent("What grind size?") == answer  # the branch
    # the tool call and its output are skipped; the answer hangs from the question
    assert parent("A coarse grind, like sea salt.\n\nIt filters more easily.") == (
        "What grind size?"
    )
    first = messages["How do I make cold brew?"]
    assert first.created_at == when(BASE + 10, tz=dt.UTC)
    assert messages[answer].model == "gpt-4o"
    assert messages[answer].finish_reason == "stop"
    split = messages["A coarse grind, like sea salt.\n\nIt filters more easily."]
    assert split.finish_reason == "length" and split.model == "gpt-4o-mini"
    assert {m.status for m in messages.values()} == {"complete"}
    assert UsageRecord.objects.count() == 0

    picture = Conversation.objects.get(user=user, title="A picture")
    texts = list(picture.messages.order_by("created_at").values_list("content", "role"))
    assert texts == [
        ("What is this?", "user"),
        ("Describe the photo please", "user"),
        ("It shows a <cat> on a mat.", "assistant"),
    ]
    # a message without a time takes its nearest kept ancestor's
    described = picture.messages.get(content="Describe the photo please")
    assert described.created_at == when(BASE + 1001, tz=dt.UTC)
    assert described.parent.content == "What is this?"


def test_chatgpt_current_node_is_parsed_to_the_kept_leaf():
    (coffee, picture) = services.imports.import_file_parse(
        data=json.dumps(CHATGPT_SAMPLE).encode()
    )
    # a2c, the only kept child of the answer a2b, was appended to it
    assert coffee.current_leaf_key == "a2b"
    assert picture.current_leaf_key == "pa"


def test_chatgpt_roles_and_finish_types_that_are_not_text_are_skipped_or_ignored():
    odd = {
        "title": "Odd values",
        "create_time": BASE,
        "current_node": "a",
        "mapping": {
            "r": node("r", None, ["u"]),
            "u": node("u", "r", ["x"], "user", "Hello", create_time=BASE + 1),
            "x": node("x", "u", ["a"], ["user"], "a list for a role"),
            "a": node(
                "a",
                "x",
                [],
                "assistant",
                "Hi.",
                create_time=BASE + 2,
                metadata={"finish_details": {"type": ["stop"]}},
            ),
        },
    }
    (conversation,) = services.imports.import_file_parse(
        data=json.dumps([odd]).encode()
    )
    kept = [(m.role, m.content) for m in conversation.messages]
    assert kept == [("user", "Hello"), ("assistant", "Hi.")]
    assert conversation.messages[1].finish_reason == ""


def test_chatgpt_files_that_would_import_blank_conversations_say_where():
    """The newcomer trial's files (no ``content_type``): each names the
    conversation and the field instead of importing a blank conversation."""
    message = {"author": {"role": "user"}, "content": {"parts": ["hi"]}}
    loop = {
        "a": {"id": "a", "parent": "b", "children": ["b"], "message": message},
        "b": {"id": "b", "parent": "a", "children": ["a"], "message": message},
        "c": {"id": "c", "parent": "b", "children": [], "message": message},
    }
    odd = {"author": {"role": "user"}, "content": {"parts": [{"x": 1}, None, 5]}}
    files = {
        "Conversation 1 (“g”): the `parent` links of nodes 'a', 'b', 'c' form a loop.": (
            loop
        ),
        "Conversation 1 (“g”), node a: `content.parts[0]` must be a string.": {
            "a": {"id": "a", "parent": None, "children": [], "message": odd}
        },
    }
    for reason, mapping in files.items():
        data = json.dumps([{"title": "g", "mapping": mapping}]).encode()
        with pytest.raises(InvalidInput) as caught:
            services.imports.import_file_parse(data=data)
        assert caught.value.message == f"{reason} Nothing was imported."


# --- import: bad files -------------------------------------------------------------------


def bad_native(mutate):
    data = {
        "format": exports.EXPORT_FORMAT,
        "version": 1,
        "conversations": [
            {
                "title": "Fine",
                "created_at": "2025-01-01T00:00:00+00:00",
                "updated_at": "2025-01-01T00:00:00+00:00",
                "messages": [
                    {
                        "id": "m1",
                        "parent_id": None,
                        "role": "user",
                        "content": "Hello",
                        "status": "complete",
                        "created_at": "2025-01-01T00:00:00+00:00",
                    },
                    {
                        "id": "m2",
                        "parent_id": "m1",
                        "role": "assistant",
                        "content": "Hi",
                        "created_at": "2025-01-01T00:00:01+00:00",
                    },
                ],
            },
            {
                "title": "Also fine",
                "created_at": "2025-01-02T00:00:00+00:00",
                "updated_at": "2025-01-02T00:00:00+00:00",
                "messages": [],
            },
        ],
    }
    mutate(data)
    return json.dumps(data).encode()


def _set(path, value):
    def mutate(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


BAD_FILES = {
    "not json": (b"\x89PNG\r\n\x1a\n not json", "not JSON"),
    "not utf-8": (b'{"a": "\xff\xfe"}', "not JSON"),
    "wrong shape": (json.dumps({"hello": "world"}).encode(), "neither"),
    "wrong version": (bad_native(_set(["version"], 99)), "version"),
    "conversations not a list": (
        bad_native(_set(["conversations"], {"a": 1})),
        "`conversations` must be a list",
    ),
    "role of the wrong type": (
        bad_native(_set(["conversations", 0, "messages", 1, "role"], 7)),
        "Conversation 1, message 2: `role` must be one of",
    ),
    "content not a string": (
        bad_native(_set(["conversations", 0, "messages", 0, "content"], ["x"])),
        "`content` must be a string",
    ),
    "bad timestamp": (
        bad_native(_set(["conversations", 1, "created_at"], "yesterday")),
        "Conversation 2: `created_at` is not an ISO 8601 time",
    ),
    "message time missing": (
        bad_native(
            lambda data: data["conversations"][0]["messages"][0].pop("created_at")
        ),
        "Conversation 1, message 1: `created_at` is missing",
    ),
    "message time null": (
        bad_native(_set(["conversations", 0, "messages", 0, "created_at"], None)),
        "Conversation 1, message 1: `created_at` must be an ISO 8601 time string, "
        "not null.",
    ),
    "conversation time a number": (
        bad_native(_set(["conversations", 1, "updated_at"], 1700000000)),
        "Conversation 2: `updated_at` must be an ISO 8601 time string, not a number.",
    ),
    "token count negative": (
        bad_native(_set(["conversations", 0, "messages", 1, "token_count"], -1)),
        "out of range",
    ),
    "NUL in content": (
        bad_native(_set(["conversations", 0, "messages", 0, "content"], "a\x00b")),
        "NUL",
    ),
    "missing parent": (
        bad_native(_set(["conversations", 0, "messages", 1, "parent_id"], "m9")),
        "not in the file",
    ),
    "parent loop": (
        bad_native(_set(["conversations", 0, "messages", 0, "parent_id"], "m2")),
        "loop",
    ),
    "duplicate id": (
        bad_native(_set(["conversations", 0, "messages", 1, "id"], "m1")),
        "appears twice",
    ),
    "bad feedback rating": (
        bad_native(
            _set(["conversations", 0, "messages", 1, "feedback"], {"rating": "meh"})
        ),
        "`rating` must be one of",
    ),
    "chatgpt parts not a list": (
        json.dumps(
            [
                {
                    "title": "x",
                    "mapping": {"a": node("a", None, [], "user", "hi", parts="hi")},
                }
            ]
        ).encode(),
        "`content.parts` must be a list",
    ),
    "chatgpt empty mapping": (
        json.dumps([{"title": "gpt", "mapping": {}}]).encode(),
        "Conversation 1 (“gpt”): `mapping` is empty",
    ),
    "chatgpt parent loop": (
        json.dumps(
            [
                {
                    "title": "x",
                    "mapping": {
                        "a": node("a", "b", ["b"], "user", "hi"),
                        "b": node("b", "a", ["a"], "assistant", "yo"),
                    },
                }
            ]
        ).encode(),
        "Conversation 1 (“x”): the `parent` links of nodes",
    ),
    "chatgpt parts not strings": (
        json.dumps(
            [
                {
                    "title": "x",
                    "mapping": {
                        "a": node("a", None, [], "user", parts=[{"x": 1}, None, 5])
                    },
                }
            ]
        ).encode(),
        "Conversation 1 (“x”), node a: `content.parts[0]` must be a string.",
    ),
    "chatgpt multimodal part neither text nor object": (
        json.dumps(
            [
                {
                    "title": "x",
                    "mapping": {
                        "a": node(
                            "a",
                            None,
                            [],
                            "user",
                            content_type="multimodal_text",
                            parts=["look", 5],
                        )
                    },
                }
            ]
        ).encode(),
        "`content.parts[1]` must be a string or a JSON object.",
    ),
    "chatgpt no text to import": (
        json.dumps(
            [
                {
                    "title": "x",
                    "mapping": {
                        "r": node("r", None, ["s"]),
                        "s": node("s", "r", [], "system", "be brief"),
                    },
                }
            ]
        ).encode(),
        "there is no user or assistant text message to import",
    ),
    "chatgpt bad time": (
        json.dumps([{"title": "x", "create_time": "noon", "mapping": {}}]).encode(),
        "Unix time",
    ),
    "empty list": (b"[]", "no conversation"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_bad_file_imports_nothing_and_says_why(auth_client, user, name):
    data, reason = BAD_FILES[name]
    response = upload(auth_client, data)
    assert response.redirect_chain[-1][0] == reverse("conversations-import")
    assert reason in response.content.decode()
    assert not Conversation.objects.filter(user=user).exists()
    assert not Message.objects.exists()


def test_a_file_over_the_size_limit_is_refused(auth_client, user, settings):
    settings.CHAT_IMPORT_MAX_BYTES = 1024
    data = json.dumps(CHATGPT_SAMPLE).encode()
    with pytest.raises(PayloadTooLarge):
        services.conversations_import(user=user, data=data)
    response = upload(auth_client, data)
    assert "larger than" in response.content.decode()
    assert not Conversation.objects.exists()


def test_too_many_conversations_or_messages_are_refused(user, settings):
    settings.CHAT_IMPORT_MAX_CONVERSATIONS = 1
    with pytest.raises(InvalidInput, match="at most 1 can be imported"):
        services.conversations_import(
            user=user, data=json.dumps(CHATGPT_SAMPLE).encode()
        )
    settings.CHAT_IMPORT_MAX_CONVERSATIONS = 10
    settings.CHAT_IMPORT_MAX_MESSAGES = 5
    with pytest.raises(InvalidInput, match="messages; at most 5"):
        services.conversations_import(
            user=user, data=json.dumps(CHATGPT_SAMPLE).encode()
        )
    assert not Conversation.objects.exists()


def test_the_import_page_has_the_form_and_needs_a_file(auth_client):
    page = auth_client.get(reverse("conversations-import")).content.decode()
    assert 'name="file"' in page and 'id="import-submit"' in page
    response = auth_client.post(reverse("conversations-import"), {}, follow=True)
    assert "Choose a file to import." in response.content.decode()


def test_anonymous_users_are_sent_to_login_and_import_needs_csrf(user):
    anonymous = Client()
    for url in (
        reverse("conversation-search") + "?q=x",
        reverse("conversations-export") + "?format=json",
        reverse("conversations-import"),
    ):
        response = anonymous.get(url)
        assert response.status_code == 302, url
        assert response.url.startswith(reverse("login")), url
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    data = json.dumps(CHATGPT_SAMPLE).encode()
    response = strict.post(
        reverse("conversations-import"),
        {"file": SimpleUploadedFile("c.json", data, content_type="application/json")},
    )
    assert response.status_code == 403
    assert not Conversation.objects.exists()

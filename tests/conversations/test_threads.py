"""Conversations as trees (issue 11): the current branch, versions, switching, editing,
and prompts built from the branch only (conversations/selectors.py,
conversations/services/threads.py, conversations/services/turns/)."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chatsite.errors import Conflict, InvalidInput, NotFound
from conversations import prompt_history, selectors, services
from conversations.models import Conversation, Feedback, Message
from inference import keys, protocol
from inference.connections import redis_sync

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("pool_heartbeat")]


def finish(message: Message, content: str) -> None:
    Message.objects.filter(id=message.id).update(
        status=Message.Status.COMPLETE, content=content
    )


def last_job_text() -> str:
    """Everything the newest queued job would show the model, joined."""
    fields = redis_sync().xrange(keys.queue_key("default"))[-1][1]
    job = protocol.Job.from_fields(fields)
    return "\n".join(m["content"] for m in job.messages)


@pytest.fixture
def run(django_capture_on_commit_callbacks):
    """Call a service with its on-commit callbacks (the job submission) executed."""

    def _run(fn, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return fn(**kwargs)

    return _run


@pytest.fixture
def chat(user, run):
    """A two-turn conversation: ``(conversation, [u1, a1, u2, a2])``, all complete."""
    first = run(services.turn_start, user=user, content="My name is Alpha.")
    finish(first.assistant_message, "Hello Alpha-answer.")
    second = run(
        services.turn_start,
        user=user,
        content="Tell me about zebras.",
        conversation_id=first.conversation.id,
    )
    finish(second.assistant_message, "Zebras-answer are striped.")
    messages = [
        first.user_message,
        first.assistant_message,
        second.user_message,
        second.assistant_message,
    ]
    return first.conversation, [Message.objects.get(id=m.id) for m in messages]


def shown(conversation: Conversation) -> list[str]:
    conversation.refresh_from_db()
    return [
        i.message.content for i in selectors.thread_items(conversation=conversation)
    ]


def test_every_message_has_its_parent_and_the_last_answer_is_the_current_leaf(chat):
    conversation, (u1, a1, u2, a2) = chat
    assert u1.parent_id is None
    assert a1.parent_id == u1.id and u2.parent_id == a1.id and a2.parent_id == u2.id
    assert (
        conversation.__class__.objects.get(id=conversation.id).current_leaf_id == a2.id
    )


def test_regenerate_adds_a_current_sibling_and_switching_back_persists(user, chat, run):
    conversation, (u1, a1, u2, a2) = chat
    again = run(services.turn_regenerate, user=user, conversation_id=conversation.id)
    assert again.assistant_message.parent_id == u2.id
    finish(again.assistant_message, "Zebras-answer, second version.")
    items = selectors.thread_items(
        conversation=Conversation.objects.get(id=conversation.id)
    )
    assert [i.message.id for i in items] == [
        u1.id,
        a1.id,
        u2.id,
        again.assistant_message.id,
    ]
    assert [(i.version_index, i.version_count) for i in items] == [
        (1, 1),
        (1, 1),
        (1, 1),
        (2, 2),
    ]
    assert items[3].previous_version.id == a2.id and items[3].next_version is None

    leaf = services.thread_switch(
        user=user, conversation_id=conversation.id, message_id=a2.id
    )
    assert leaf.id == a2.id
    # persisted: a fresh read of the conversation shows the first version
    assert shown(conversation)[-1] == "Zebras-answer are striped."
    items = selectors.thread_items(
        conversation=Conversation.objects.get(id=conversation.id)
    )
    assert (items[3].version_index, items[3].version_count) == (1, 2)


def test_regenerating_an_earlier_answer_branches_there_and_prompts_without_later_turns(
    user, chat, run
):
    conversation, (u1, a1, u2, a2) = chat
    again = run(
        services.turn_regenerate,
        user=user,
        conversation_id=conversation.id,
        message_id=a1.id,
    )
    assert again.assistant_message.parent_id == u1.id
    prompt = last_job_text()
    assert "My name is Alpha." in prompt
    assert "zebra" not in prompt.lower() and "Hello Alpha-answer" not in prompt
    assert shown(conversation) == ["My name is Alpha.", ""]


def test_editing_an_early_message_branches_and_the_prompt_holds_nothing_of_the_old_branch(
    user, chat, run
):
    conversation, (u1, a1, u2, a2) = chat
    edited = run(
        services.turn_edit,
        user=user,
        conversation_id=conversation.id,
        message_id=u1.id,
        content="My name is Beta.",
    )
    assert edited.user_message.parent_id is None  # a sibling of the first message
    assert edited.assistant_message.parent_id == edited.user_message.id
    prompt = last_job_text()
    assert "My name is Beta." in prompt
    for old in ("Alpha", "zebra", "Zebras"):
        assert old not in prompt
    finish(edited.assistant_message, "Hello Beta-answer.")
    items = selectors.thread_items(
        conversation=Conversation.objects.get(id=conversation.id)
    )
    assert [i.message.content for i in items] == [
        "My name is Beta.",
        "Hello Beta-answer.",
    ]
    assert (items[0].version_index, items[0].version_count) == (2, 2)

    # the next turn continues the new branch only
    run(
        services.turn_start,
        user=user,
        content="And now?",
        conversation_id=conversation.id,
    )
    prompt = last_job_text()
    assert "Hello Beta-answer." in prompt and "And now?" in prompt
    assert "Alpha" not in prompt and "ebra" not in prompt

    # switching back to the first version of the first message shows its whole branch
    Message.objects.filter(status=Message.Status.STREAMING).update(
        status=Message.Status.COMPLETE, content="later"
    )
    leaf = services.thread_switch(
        user=user, conversation_id=conversation.id, message_id=u1.id
    )
    assert leaf.id == a2.id  # its newest leaf: the zebra answer
    assert shown(conversation) == [
        "My name is Alpha.",
        "Hello Alpha-answer.",
        "Tell me about zebras.",
        "Zebras-answer are striped.",
    ]
    run(
        services.turn_start, user=user, content="More?", conversation_id=conversation.id
    )
    prompt = last_job_text()
    assert "Zebras-answer are striped." in prompt and "Beta" not in prompt


def test_switching_to_a_version_follows_its_newest_replies_down(user, chat, run):
    conversation, (u1, a1, u2, a2) = chat
    edited = run(
        services.turn_edit,
        user=user,
        conversation_id=conversation.id,
        message_id=u2.id,
        content="Tell me about lions.",
    )
    finish(edited.assistant_message, "Lions-answer.")
    # back to the zebra question, then forward again to the lion one
    services.thread_switch(user=user, conversation_id=conversation.id, message_id=u2.id)
    assert shown(conversation)[-1] == "Zebras-answer are striped."
    services.thread_switch(
        user=user, conversation_id=conversation.id, message_id=edited.user_message.id
    )
    assert shown(conversation)[-2:] == ["Tell me about lions.", "Lions-answer."]


def test_the_rolling_summary_is_used_only_when_it_lies_on_the_branch(user, chat):
    conversation, (u1, a1, u2, a2) = chat
    Conversation.objects.filter(id=conversation.id).update(
        summary="SUMMARY-OF-ALPHA", summary_upto=a1
    )
    conversation.refresh_from_db()
    history, summary, covers = prompt_history.history_and_summary(
        conversation=conversation, upto=a2
    )
    assert summary == "SUMMARY-OF-ALPHA" and covers == 2
    assert [m["content"] for m in history][-1] == "Zebras-answer are striped."
    sibling = Message.objects.create(
        conversation=conversation, role=Message.Role.USER, content="Beta"
    )
    history, summary, covers = prompt_history.history_and_summary(
        conversation=conversation, upto=sibling
    )
    assert (history, summary, covers) == (
        [{"role": "user", "content": "Beta"}],
        "",
        0,
    )


def test_an_edit_does_not_send_the_other_branchs_summary(user, chat, run):
    conversation, (u1, a1, u2, a2) = chat
    Conversation.objects.filter(id=conversation.id).update(
        summary="SUMMARY-OF-ALPHA", summary_upto=a1
    )
    run(
        services.turn_start,
        user=user,
        content="Next on this branch",
        conversation_id=conversation.id,
    )
    assert "SUMMARY-OF-ALPHA" in last_job_text()
    Message.objects.filter(status=Message.Status.STREAMING).update(
        status=Message.Status.COMPLETE, content="ok"
    )
    run(
        services.turn_edit,
        user=user,
        conversation_id=conversation.id,
        message_id=u1.id,
        content="My name is Beta.",
    )
    assert "SUMMARY-OF-ALPHA" not in last_job_text()


@pytest.mark.parametrize("content", ["", "   ", "\u200b\n", None])
def test_an_empty_edit_is_refused_and_stores_nothing(user, chat, content):
    conversation, (u1, *_rest) = chat
    before = Message.objects.count()
    with pytest.raises(InvalidInput) as error:
        services.turn_edit(
            user=user,
            conversation_id=conversation.id,
            message_id=u1.id,
            content=content,
        )
    assert "empty" in error.value.message
    assert Message.objects.count() == before


def test_an_answer_cannot_be_edited_nor_a_question_regenerated(user, chat):
    conversation, (u1, a1, *_rest) = chat
    with pytest.raises(InvalidInput):
        services.turn_edit(
            user=user, conversation_id=conversation.id, message_id=a1.id, content="x"
        )
    with pytest.raises(InvalidInput):
        services.turn_regenerate(
            user=user, conversation_id=conversation.id, message_id=u1.id
        )


def test_another_users_messages_are_not_found(other_user, chat):
    conversation, (u1, a1, *_rest) = chat
    with pytest.raises(NotFound):
        services.thread_switch(
            user=other_user, conversation_id=conversation.id, message_id=a1.id
        )
    with pytest.raises(NotFound):
        services.turn_edit(
            user=other_user,
            conversation_id=conversation.id,
            message_id=u1.id,
            content="x",
        )
    with pytest.raises(NotFound):
        services.turn_regenerate(
            user=other_user, conversation_id=conversation.id, message_id=a1.id
        )


def test_switch_edit_and_regenerate_endpoints_are_owner_checked(other_user, chat):
    conversation, (u1, a1, *_rest) = chat
    intruder = Client()
    intruder.force_login(other_user)
    for name, mid, data in [
        ("message-switch", a1.id, {}),
        ("message-edit", u1.id, {"content": "x"}),
        ("message-regenerate-one", a1.id, {}),
    ]:
        response = intruder.post(reverse(name, args=[conversation.id, mid]), data)
        assert response.status_code == 404, name
    assert (
        intruder.get(reverse("conversation-thread", args=[conversation.id])).status_code
        == 404
    )
    conversation.refresh_from_db()
    assert conversation.current_leaf_id == _rest[-1].id  # unchanged


def test_switch_endpoint_persists_and_answers_the_branch_html(
    auth_client, user, chat, run
):
    conversation, (u1, a1, u2, a2) = chat
    again = run(services.turn_regenerate, user=user, conversation_id=conversation.id)
    finish(again.assistant_message, "Second zebra version.")
    response = auth_client.post(
        reverse("message-switch", args=[conversation.id, a2.id])
    )
    assert response.status_code == 200
    body = response.json()
    assert body["leaf_id"] == str(a2.id)
    assert (
        f'id="m-{a2.id}"' in body["html"] and "Second zebra version" not in body["html"]
    )
    assert '<span class="version-label">1/2</span>' in body["html"]
    page = auth_client.get(reverse("conversation-detail", args=[conversation.id]))
    assert f'id="m-{a2.id}"' in page.content.decode()  # after a reload too


def test_viewing_a_branch_through_a_message_stores_nothing(
    auth_client, user, other_user, chat, run
):
    # a search result on another branch: shown, not made current
    conversation, (u1, a1, u2, a2) = chat
    again = run(services.turn_regenerate, user=user, conversation_id=conversation.id)
    finish(again.assistant_message, "Second zebra version.")
    url = reverse("conversation-thread", args=[conversation.id])
    with CaptureQueriesContext(connection) as queries:
        response = auth_client.get(url, {"through": str(a2.id)})
    assert response.status_code == 200
    html = response.content.decode()
    assert f'id="m-{a2.id}"' in html and "Second zebra version" not in html
    assert not [q for q in queries if q["sql"].lstrip().upper().startswith("UPDATE")]
    conversation.refresh_from_db()
    assert conversation.current_leaf_id == again.assistant_message.id
    assert "Second zebra version" in auth_client.get(url).content.decode()
    # a message of no conversation of the user's is a 404, as is text that is no id
    other = Client()
    other.force_login(other_user)
    assert other.get(url, {"through": str(a2.id)}).status_code == 404
    assert auth_client.get(url, {"through": "nope"}).status_code == 404
    elsewhere = run(services.turn_start, user=user, content="Another chat")
    foreign = str(elsewhere.assistant_message.id)
    assert auth_client.get(url, {"through": foreign}).status_code == 404


def test_a_message_sent_after_a_viewed_branch_continues_it_and_makes_it_current(
    auth_client, user, chat, run
):
    conversation, (u1, a1, u2, a2) = chat
    again = run(services.turn_regenerate, user=user, conversation_id=conversation.id)
    finish(again.assistant_message, "Second zebra version.")
    url = reverse("message-send", args=[conversation.id])
    response = auth_client.post(url, {"content": "And horses?", "after": str(a2.id)})
    assert response.status_code == 201
    asked = Message.objects.get(content="And horses?")
    assert asked.parent_id == a2.id
    assert "Zebras-answer are striped." in last_job_text()
    assert "Second zebra version" not in last_job_text()
    conversation.refresh_from_db()
    assert (
        str(conversation.current_leaf_id) == response.json()["assistant_message"]["id"]
    )
    # only a finished answer can be followed
    finish(Message.objects.get(id=conversation.current_leaf_id), "Horses-answer.")
    refused = auth_client.post(url, {"content": "Hm", "after": str(u1.id)})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "bad_after"


def test_switching_while_an_answer_streams_is_refused_with_a_clear_message(
    auth_client, user, chat, run
):
    conversation, (u1, a1, u2, a2) = chat
    run(services.turn_regenerate, user=user, conversation_id=conversation.id)
    with pytest.raises(Conflict):
        services.thread_switch(
            user=user, conversation_id=conversation.id, message_id=a2.id
        )
    response = auth_client.post(
        reverse("message-switch", args=[conversation.id, a2.id])
    )
    assert response.status_code == 409
    assert "before switching versions" in response.json()["error"]["message"]


def test_edit_endpoint_validates_and_starts_a_turn(auth_client, chat):
    conversation, (u1, *_rest) = chat
    url = reverse("message-edit", args=[conversation.id, u1.id])
    before = Message.objects.count()
    empty = auth_client.post(url, {"content": "  "})
    assert empty.status_code == 400 and "empty" in empty.json()["error"]["message"]
    assert Message.objects.count() == before
    response = auth_client.post(url, {"content": "My name is Gamma."})
    assert response.status_code == 201
    body = response.json()
    assert body["thread_url"] == reverse("conversation-thread", args=[conversation.id])
    fragment = auth_client.get(body["thread_url"]).content.decode()
    assert "My name is Gamma." in fragment and "zebra" not in fragment
    assert 'data-status="streaming"' in fragment


def test_the_thread_is_read_in_a_fixed_number_of_queries(user, chat, run):
    conversation, _ = chat

    def count() -> int:
        fresh = Conversation.objects.get(id=conversation.id)
        with CaptureQueriesContext(connection) as queries:
            selectors.thread_items(conversation=fresh)
        return len(queries)

    short = count()
    for n in range(4):
        turn = run(
            services.turn_start,
            user=user,
            content=f"question {n}",
            conversation_id=conversation.id,
        )
        finish(turn.assistant_message, f"answer {n}")
    assert count() == short <= 3


def test_feedback_is_kept_per_answer_version(user, chat, run):
    conversation, (u1, a1, u2, a2) = chat
    again = run(services.turn_regenerate, user=user, conversation_id=conversation.id)
    finish(again.assistant_message, "better")
    services.feedback_set(
        user=user,
        conversation_id=conversation.id,
        message_id=a2.id,
        rating="down",
        reason="wrong",
        comment="made up",
    )
    services.feedback_set(
        user=user,
        conversation_id=conversation.id,
        message_id=again.assistant_message.id,
        rating="up",
    )
    ratings = dict(Feedback.objects.values_list("message_id", "rating"))
    assert ratings == {a2.id: "down", again.assistant_message.id: "up"}
    items = selectors.thread_items(
        conversation=Conversation.objects.get(id=conversation.id)
    )
    assert items[-1].rating == "up"


def test_the_migration_links_linear_history_into_a_tree(user):
    migration = importlib.import_module("conversations.migrations.0005_threads")
    conversation = Conversation.objects.create(user=user, title="old")
    u1 = Message.objects.create(conversation=conversation, role="user", content="q1")
    a1 = Message.objects.create(
        conversation=conversation, role="assistant", content="a1", parent=u1
    )
    a1b = Message.objects.create(
        conversation=conversation, role="assistant", content="a1b", parent=u1
    )
    u2 = Message.objects.create(conversation=conversation, role="user", content="q2")
    a2 = Message.objects.create(
        conversation=conversation, role="assistant", content="a2", parent=u2
    )
    with connection.schema_editor() as editor:
        migration.backfill_tree(apps, editor)
    conversation.refresh_from_db()
    u2.refresh_from_db()
    assert u2.parent_id == a1b.id and conversation.current_leaf_id == a2.id
    items = selectors.thread_items(conversation=conversation)
    assert [i.message.content for i in items] == ["q1", "a1b", "q2", "a2"]
    assert (items[1].version_index, items[1].version_count) == (2, 2)
    assert items[1].previous_version.id == a1.id

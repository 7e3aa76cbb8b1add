"""Chat pages and JSON endpoints: bad input, ownership, CSRF, conversation management."""

import pytest
from django.test import Client
from django.urls import reverse

from conversations import services
from conversations.models import Conversation, Message
from gateway.models import ModelPool
from inference import keys, protocol
from inference.connections import redis_sync

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("pool_heartbeat")]


def queued_jobs() -> int:
    return redis_sync().xlen(keys.queue_key("default"))


def finish(message: Message, content: str = "an answer") -> None:
    Message.objects.filter(id=message.id).update(
        status=Message.Status.COMPLETE, content=content
    )


@pytest.fixture
def turn(user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return services.turn_start(user=user, content="What is 2+2?")


@pytest.fixture
def intruder(other_user):
    client = Client()
    client.force_login(other_user)
    return client


def test_pages_require_login_and_send_anonymous_users_to_the_login_page():
    client = Client()
    response = client.get(reverse("chat-home"))
    assert response.status_code == 302 and response.url.startswith(reverse("login"))
    assert (
        client.post(reverse("message-send-new"), {"content": "hi"}).status_code == 302
    )
    assert Message.objects.count() == 0
    assert client.get(reverse("login")).status_code == 200
    assert client.get(reverse("signup")).status_code == 200


def test_signup_creates_an_account_and_signs_in():
    client = Client()
    response = client.post(
        reverse("signup"),
        {
            "username": "newbie",
            "password1": "a-long-passphrase-42",
            "password2": "a-long-passphrase-42",
        },
    )
    assert response.status_code == 302
    assert client.get(reverse("chat-home")).status_code == 200


def test_login_and_logout(user):
    client = Client()
    response = client.post(
        reverse("login"), {"username": "alice", "password": "pw-alice-123"}
    )
    assert response.status_code == 302
    assert client.get(reverse("chat-home")).status_code == 200
    client.post(reverse("logout"))
    assert client.get(reverse("chat-home")).status_code == 302


def test_send_starts_a_conversation_titled_after_the_first_message(
    auth_client, django_capture_on_commit_callbacks
):
    long_text = "Explain   the difference between TCP and UDP, with examples of when each is used"
    with django_capture_on_commit_callbacks(execute=True):
        response = auth_client.post(reverse("message-send-new"), {"content": long_text})
    assert response.status_code == 201
    body = response.json()
    conversation = Conversation.objects.get(id=body["conversation"]["id"])
    assert conversation.title.startswith("Explain the difference between TCP and UDP")
    assert len(conversation.title) <= 60 and conversation.title.endswith("…")
    assert body["conversation"]["created"] is True
    assert body["assistant_message"]["stream_url"].endswith("/stream/")
    assert queued_jobs() == 1
    job = protocol.Job.from_fields(redis_sync().xrange(keys.queue_key("default"))[0][1])
    assert job.job_id == body["assistant_message"]["id"]
    assert job.messages[-1] == {"role": "user", "content": long_text}


def test_title_is_never_empty():
    assert services.title_from_text(" \n\t ") == "New chat"
    assert services.title_from_text("Hi\nthere") == "Hi there"


@pytest.mark.parametrize("content", ["", "   ", "\n\t "])
def test_empty_message_is_a_400_and_stores_nothing(auth_client, content):
    response = auth_client.post(reverse("message-send-new"), {"content": content})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "empty_message"
    assert "empty" in response.json()["error"]["message"]
    assert Conversation.objects.count() == 0 and Message.objects.count() == 0
    assert queued_jobs() == 0


def test_missing_content_field_is_a_400(auth_client):
    assert auth_client.post(reverse("message-send-new"), {}).status_code == 400


def test_message_over_the_limit_is_a_413_and_stores_nothing(
    auth_client, turn, settings
):
    # the character limit alone: a model window that holds the longest message (a
    # prompt over the window is its own 400, tests/gateway/test_generations.py)
    settings.MEMORY_CONTEXT_TOKENS = 100_000
    ModelPool.objects.filter(name="default").update(max_context=100_000)
    before = Message.objects.count()
    finish(turn.assistant_message)
    too_long = "x" * (settings.CHAT_MAX_MESSAGE_CHARS + 1)
    response = auth_client.post(
        reverse("message-send", args=[turn.conversation.id]), {"content": too_long}
    )
    assert response.status_code == 413
    assert "32,000" in response.json()["error"]["message"]
    assert Message.objects.count() == before
    exactly = "x" * settings.CHAT_MAX_MESSAGE_CHARS
    ok = auth_client.post(
        reverse("message-send", args=[turn.conversation.id]), {"content": exactly}
    )
    assert ok.status_code == 201


def test_unknown_conversation_is_a_404(auth_client):
    missing = "00000000-0000-0000-0000-000000000000"
    assert (
        auth_client.post(
            reverse("message-send", args=[missing]), {"content": "hi"}
        ).status_code
        == 404
    )
    assert (
        auth_client.get(reverse("conversation-detail", args=[missing])).status_code
        == 404
    )
    assert Message.objects.count() == 0


def test_missing_csrf_token_is_a_403(user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post(reverse("message-send-new"), {"content": "hi"})
    assert response.status_code == 403
    assert Message.objects.count() == 0


def test_sending_while_an_answer_streams_is_a_409_and_stores_nothing(auth_client, turn):
    before = Message.objects.count()
    response = auth_client.post(
        reverse("message-send", args=[turn.conversation.id]), {"content": "more"}
    )
    assert response.status_code == 409
    assert "still being written" in response.json()["error"]["message"]
    assert Message.objects.count() == before


def test_another_user_cannot_read_send_rename_delete_stop_or_regenerate(intruder, turn):
    conv = turn.conversation
    answer = turn.assistant_message
    finish(answer, "private answer")
    page = intruder.get(reverse("conversation-detail", args=[conv.id]))
    assert page.status_code == 404 and b"2+2" not in page.content
    assert (
        intruder.post(
            reverse("message-send", args=[conv.id]), {"content": "x"}
        ).status_code
        == 404
    )
    assert (
        intruder.post(
            reverse("conversation-rename", args=[conv.id]), {"title": "pwned"}
        ).status_code
        == 404
    )
    assert (
        intruder.get(reverse("conversation-delete", args=[conv.id])).status_code == 404
    )
    assert (
        intruder.post(reverse("conversation-delete", args=[conv.id])).status_code == 404
    )
    assert (
        intruder.post(reverse("message-stop", args=[conv.id, answer.id])).status_code
        == 404
    )
    assert (
        intruder.post(reverse("message-regenerate", args=[conv.id])).status_code == 404
    )
    home = intruder.get(reverse("chat-home"))
    assert conv.title.encode() not in home.content
    conv.refresh_from_db()
    assert conv.title == "What is 2+2?"
    assert Message.objects.filter(conversation=conv).count() == 2


def test_conversation_list_is_newest_first_and_only_mine(auth_client, user, other_user):
    for title in ["first", "second", "third"]:
        Conversation.objects.create(user=user, title=title)
    Conversation.objects.create(user=other_user, title="not-mine")
    page = auth_client.get(reverse("chat-home")).content.decode()
    assert page.index("third") < page.index("second") < page.index("first")
    assert "not-mine" not in page


def test_conversation_page_renders_markdown_safely(auth_client, turn):
    finish(
        turn.assistant_message,
        "# Title\n\n```python\nprint('hi')\n```\n\n<img src=x onerror=alert(1)>",
    )
    page = auth_client.get(
        reverse("conversation-detail", args=[turn.conversation.id])
    ).content.decode()
    assert "<h1>Title</h1>" in page
    assert 'class="highlight"' in page
    assert "<img" not in page and "&lt;img" in page


def test_rename(auth_client, turn):
    url = reverse("conversation-rename", args=[turn.conversation.id])
    response = auth_client.post(
        url, {"title": "  Arithmetic  "}, HTTP_ACCEPT="application/json"
    )
    assert response.json()["title"] == "Arithmetic"
    bad = auth_client.post(url, {"title": "   "}, HTTP_ACCEPT="application/json")
    assert bad.status_code == 400
    turn.conversation.refresh_from_db()
    assert turn.conversation.title == "Arithmetic"
    form = auth_client.post(url, {"title": "From the form"})
    assert form.status_code == 302
    turn.conversation.refresh_from_db()
    assert turn.conversation.title == "From the form"


def test_delete_asks_for_confirmation_then_deletes_everything(
    auth_client, turn, django_capture_on_commit_callbacks
):
    url = reverse("conversation-delete", args=[turn.conversation.id])
    confirm = auth_client.get(url)
    assert confirm.status_code == 200 and b"cannot be undone" in confirm.content
    assert Conversation.objects.filter(id=turn.conversation.id).exists()
    with django_capture_on_commit_callbacks(execute=True):
        response = auth_client.post(url)
    assert response.status_code == 302
    assert not Conversation.objects.filter(id=turn.conversation.id).exists()
    assert Message.objects.count() == 0
    # the streaming answer of a deleted conversation is cancelled
    assert redis_sync().exists(keys.cancel_key(turn.assistant_message.job_id))


def test_stop_sets_the_cancel_flag_of_a_streaming_answer(auth_client, turn):
    response = auth_client.post(
        reverse("message-stop", args=[turn.conversation.id, turn.assistant_message.id])
    )
    assert response.status_code == 202
    assert redis_sync().exists(keys.cancel_key(turn.assistant_message.job_id))


def test_regenerate_keeps_the_previous_answer_without_duplicating_the_question(
    auth_client, turn, django_capture_on_commit_callbacks
):
    finish(turn.assistant_message, "four")
    url = reverse("message-regenerate", args=[turn.conversation.id])
    with django_capture_on_commit_callbacks(execute=True):
        response = auth_client.post(url)
    assert response.status_code == 201
    body = response.json()
    assert body["conversation"]["id"] == str(turn.conversation.id)
    assert body["conversation"]["created"] is False
    messages = list(turn.conversation.messages.order_by("created_at"))
    assert [m.role for m in messages] == ["user", "assistant", "assistant"]
    assert messages[2].parent_id == messages[0].id == messages[1].parent_id
    assert Conversation.objects.count() == 1
    # the new job sees the question once, and not the old answer
    job = protocol.Job.from_fields(
        redis_sync().xrange(keys.queue_key("default"))[-1][1]
    )
    assert [m["role"] for m in job.messages] == ["system", "user"]
    # while it streams, another regenerate is refused
    assert auth_client.post(url).status_code == 409
    finish(messages[2], "4")
    from conversations.selectors import thread_items

    turn.conversation.refresh_from_db()  # its current leaf is the new answer
    items = thread_items(conversation=turn.conversation)
    assert [i.message.content for i in items] == ["What is 2+2?", "4"]
    assert [v.content for v in items[1].versions] == ["four", "4"]
    assert (items[1].version_index, items[1].version_count) == (2, 2)
    page = auth_client.get(
        reverse("conversation-detail", args=[turn.conversation.id])
    ).content.decode()
    assert '<span class="version-label">2/2</span>' in page
    assert "Earlier answers" not in page


def test_regenerate_with_nothing_to_answer_is_a_409(auth_client, user):
    conversation = Conversation.objects.create(user=user, title="empty")
    response = auth_client.post(reverse("message-regenerate", args=[conversation.id]))
    assert response.status_code == 409


@pytest.mark.parametrize("content", ["hi\x00there", "\u200b\u200b", "\u200d \ufeff"])
def test_nul_bytes_and_invisible_only_messages_are_a_400_and_store_nothing(
    auth_client, content
):
    response = auth_client.post(reverse("message-send-new"), {"content": content})
    assert response.status_code == 400
    assert response.json()["error"]["code"] in ("invalid_character", "empty_message")
    assert Message.objects.count() == 0 and Conversation.objects.count() == 0


def test_titles_with_nul_bytes_are_refused_and_the_old_title_kept(auth_client, turn):
    url = reverse("conversation-rename", args=[turn.conversation.id])
    response = auth_client.post(
        url, {"title": "a\x00b"}, HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 400
    turn.conversation.refresh_from_db()
    assert turn.conversation.title == "What is 2+2?"


def test_renaming_someone_elses_conversation_is_a_404_even_with_a_bad_title(
    intruder, turn
):
    url = reverse("conversation-rename", args=[turn.conversation.id])
    assert (
        intruder.post(url, {"title": ""}, HTTP_ACCEPT="application/json").status_code
        == 404
    )


def test_stopping_a_user_message_is_a_400(auth_client, turn):
    url = reverse("message-stop", args=[turn.conversation.id, turn.user_message.id])
    response = auth_client.post(url)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "not_stoppable"


def test_a_request_body_over_the_upload_limit_is_a_json_413(auth_client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = auth_client.post(
        reverse("message-send-new"),
        {"content": "x" * 20_000},
        HTTP_ACCEPT="application/json",
        HTTP_X_CSRFTOKEN="unused",
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert Message.objects.count() == 0

"""Fuzz the JSON endpoints (issue 13): the OpenAI-compatible API through its own ASGI
handler, and the chat's JSON POST endpoints through the site's.

Bodies: arbitrary bytes (invalid UTF-8), arbitrary JSON, OpenAI-shaped objects whose
every field may have the wrong type, lone surrogates in JSON escapes, huge and 100,000
deep nestings. What must hold for every one: no 500; nothing stored (Message and
UsageRecord rows) unless the request was accepted; an API error is OpenAI's JSON
(``{"error": {"message", "type", "code"}}``). No worker serves the pools here, so a
valid request is refused at admission (503) and nothing generates.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core import signals
from django.db import close_old_connections
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conversations.models import Conversation, Feedback, Message
from gateway import services as gateway_services
from gateway.models import UsageRecord

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)

# Text with what breaks encoders: lone surrogates, NUL, a 4-byte character.
_odd_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["\ud800", "a\udfffb", "\x00", "😀", "\u202e", "", " "]),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    _odd_text,
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(_odd_text, inner, max_size=4)
    ),
    max_leaves=12,
)
_message = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "system", "assistant"]), _json)},
    optional={"content": _json, "name": _json},
)
_completion = st.fixed_dictionaries(
    {
        "model": st.one_of(st.just("default"), _json),
        "messages": st.one_of(st.lists(_message, max_size=3), _json),
    },
    optional={
        name: _json
        for name in (
            "stream",
            "temperature",
            "top_p",
            "max_tokens",
            "max_completion_tokens",
            "stop",
            "n",
            "seed",
            "stream_options",
            "presence_penalty",
            "frequency_penalty",
            "cache",
            "user",
        )
    },
)
_embedding = st.fixed_dictionaries(
    {"model": st.one_of(st.just("embed"), _json), "input": _json},
    optional={"encoding_format": _json, "dimensions": _json, "user": _json},
)


def _encoded(value: Any) -> bytes:
    """JSON with \\u escapes (lone surrogates stay escapes, as a client sends them)."""
    return json.dumps(value, ensure_ascii=True).encode()


_bodies = {
    "completions": st.one_of(
        st.binary(max_size=64), _json.map(_encoded), _completion.map(_encoded)
    ),
    "embeddings": st.one_of(
        st.binary(max_size=64), _json.map(_encoded), _embedding.map(_encoded)
    ),
}
# Fixed hostile bodies every run sees.
DEEP = 100_000
HOSTILE = [
    b"[" * DEEP + b"]" * DEEP,
    b'{"model": "default", "messages": ' + b"[" * DEEP + b"]" * DEEP + b"}",
    b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    b'{"model": "\\ud800", "messages": [{"role": "user", "content": "hi"}]}',
    b'{"model": "default", "messages": [{"role": "\\udfff", "content": "hi"}]}',
    b'{"model": "default", "messages": [{"role": "user", "content": "\\ud800"}]}',
    b'{"model": "default", "input": "\\ud800x"}',
    b'{"model": "default\xff\xfe", "messages": []}',
    b"\xef\xbb\xbf{}",
    b'{"model": "default", "messages": [{"role": "user", "content": "'
    + b"x" * 3_000_000
    + b'"}]}',
    b"NaN",
    b'{"model": 1e999999}',
    b'{"model": "default", "max_tokens": 1e400, "messages": []}',
]


def _asgi(method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple:
    """Call ``chatsite.asgi.application`` (the API's own handler for /v1/ paths) as
    the web server would; return (status, headers, body)."""
    from chatsite.asgi import application

    raw = [(b"host", b"testserver")] + [
        (k.lower().encode(), v.encode()) for k, v in headers.items()
    ]
    raw.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    sent: dict[str, Any] = {"body": b""}
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client stays until the response ends
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            sent["status"] = message["status"]
            sent["headers"] = {
                k.decode().lower(): v.decode() for k, v in message["headers"]
            }
        elif message["type"] == "http.response.body":
            sent["body"] += message.get("body", b"")

    # As Django's test client does: the request must not close the test's connection
    # (it holds the test's transaction).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        async_to_sync(application)(scope, receive, send)
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
    return sent["status"], sent["headers"], sent["body"]


def _stored() -> tuple[int, int, int]:
    return (
        Message.objects.count(),
        UsageRecord.objects.count(),
        Conversation.objects.count(),
    )


def _assert_api_answer(status: int, headers: dict, body: bytes, where: Any) -> None:
    assert status != 500 and status < 600, (status, where, body[:300])
    if status >= 400:
        assert headers["content-type"].startswith("application/json"), where
        error = json.loads(body)["error"]
        assert isinstance(error["message"], str) and error["message"], where
        assert isinstance(error["type"], str) and error["type"], where
        assert isinstance(error["code"], str) and error["code"], where


@pytest.fixture
def api_key(user) -> str:
    return gateway_services.api_key_create(user=user)[1]


@pytest.mark.parametrize("endpoint", ["completions", "embeddings"])
def test_hostile_api_bodies_get_a_json_error_and_store_nothing(api_key, endpoint):
    path = f"/v1/{'chat/completions' if endpoint == 'completions' else 'embeddings'}"
    auth = {"authorization": f"Bearer {api_key}", "content-type": "application/json"}
    before = _stored()
    for body in HOSTILE:
        status, headers, answer = _asgi("POST", path, body, auth)
        _assert_api_answer(status, headers, answer, body[:80])
        assert status >= 400, body[:80]
    assert _stored() == before


@pytest.mark.parametrize("endpoint", ["completions", "embeddings"])
def test_fuzzed_api_bodies_never_500_and_store_nothing(api_key, endpoint):
    path = f"/v1/{'chat/completions' if endpoint == 'completions' else 'embeddings'}"
    auth = {"authorization": f"Bearer {api_key}", "content-type": "application/json"}

    @FUZZ
    @given(body=_bodies[endpoint])
    def run(body: bytes) -> None:
        before = _stored()
        status, headers, answer = _asgi("POST", path, body, auth)
        _assert_api_answer(status, headers, answer, body)
        assert _stored() == before

    run()


@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    authorization=st.one_of(
        st.text(
            alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=60
        ),
        st.just("Bearer sk-"),
    ),
    body=st.binary(max_size=32),
)
def test_fuzzed_models_requests_never_500(method, authorization, body):
    headers = {"authorization": authorization} if authorization else {}
    status, response_headers, answer = _asgi(
        "GET" if method == "GET" else method, "/v1/models", body, headers
    )
    _assert_api_answer(status, response_headers, answer, (method, authorization))
    assert status in (401, 405)


# --- the chat's JSON POST endpoints (session, form or JSON bodies) --------------------


@pytest.fixture
def chat(user) -> dict[str, Any]:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    conv = Conversation.objects.create(user=user, title="t")
    question = Message.objects.create(
        conversation=conv, role=Message.Role.USER, content="q"
    )
    answer = Message.objects.create(
        conversation=conv,
        role=Message.Role.ASSISTANT,
        content="a",
        status=Message.Status.COMPLETE,
        parent=question,
    )
    return {"client": client, "conversation": conv, "answer": answer}


_content_types = st.sampled_from(
    [
        "application/json",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=zz",
        "text/plain",
        "application/json; charset=latin-1",
    ]
)
_chat_body = st.one_of(
    st.binary(max_size=64),
    _json.map(_encoded),
    st.fixed_dictionaries(
        {},
        optional={
            k: _json for k in ("rating", "reason", "comment", "title", "content")
        },
    ).map(_encoded),
)


def _assert_chat_answer(response: Any, where: Any) -> None:
    assert response.status_code != 500, (where, response.content[:300])
    if response.status_code >= 400 and response["Content-Type"].startswith(
        "application/json"
    ):
        error = response.json()["error"]
        assert error["message"] and error["code"], where


@pytest.mark.parametrize("name", ["feedback", "stop", "rename", "send", "regenerate"])
def test_fuzzed_chat_posts_never_500_and_store_only_what_they_accept(
    chat, settings, name
):
    """Every body and content type on the chat's JSON endpoints: a clear 4xx (or the
    normal answer), never a 500; a refused request stores nothing. No worker: a valid
    message or regeneration is refused at admission (503) with nothing stored."""
    settings.CHAT_MESSAGE_RATE = "100000/m"
    conv, answer = chat["conversation"], chat["answer"]
    urls = {
        "feedback": reverse("message-feedback", args=[conv.id, answer.id]),
        "stop": reverse("message-stop", args=[conv.id, answer.id]),
        "rename": reverse("conversation-rename", args=[conv.id]),
        "send": reverse("message-send-new"),
        "regenerate": reverse("message-regenerate", args=[conv.id]),
    }
    client = chat["client"]

    @FUZZ
    @given(body=_chat_body, content_type=_content_types)
    def run(body: bytes, content_type: str) -> None:
        before = (*_stored(), Feedback.objects.count())
        response = client.generic(
            "POST",
            urls[name],
            data=body,
            content_type=content_type,
            HTTP_ACCEPT="application/json",
        )
        _assert_chat_answer(response, (body, content_type))
        if response.status_code >= 400:
            assert (*_stored(), Feedback.objects.count()) == before, response.content

    run()


@pytest.mark.parametrize("body", HOSTILE[:3] + HOSTILE[5:6])
def test_deeply_nested_json_feedback_is_a_400(chat, body):
    conv, answer = chat["conversation"], chat["answer"]
    response = chat["client"].generic(
        "POST",
        reverse("message-feedback", args=[conv.id, answer.id]),
        data=body,
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] in (
        "invalid_input",
        "invalid_rating",
        "invalid_character",  # the lone surrogate, refused at the door
    )
    assert not Feedback.objects.exists()

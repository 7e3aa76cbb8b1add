"""Every request bounded, no debug page: the app's own body cap in front of Django
(chatsite/bodycap.py), OpenAI-shaped errors for everything under /v1/, DEBUG off under
`make run` (chatsite/settings/dev.py), HEAD wherever GET is answered, and the caps on
work a small input could make large (JSON depth, Markdown, the remember regex)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from django.urls import reverse

from chatsite import asgi
from chatsite.errors import InvalidInput
from chatsite.jsonbody import json_depth, json_loads_bounded
from conversations.models import Conversation, Message
from conversations.rendering import markdown_to_html
from memory import services as memory_services
from memory.models import Document, MemoryFact
from tests.urlwalk import Unfillable, routes, url_fill

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024


async def asgi_call(
    path: str,
    *,
    method: str = "GET",
    headers: list[tuple[bytes, bytes]] | None = None,
    chunks: list[bytes] | None = None,
    more_after: bool = False,
) -> tuple[int, dict[bytes, bytes], bytes]:
    """Send one request through chatsite.asgi.application; return status, headers
    and body. ``more_after``: the client announces more body than it sends, so an app
    that waits for the whole body never answers."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), *(headers or [])],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    app = ApplicationCommunicator(asgi.application, scope)
    parts = chunks or [b""]
    for i, part in enumerate(parts):
        last = i == len(parts) - 1 and not more_after
        await app.send_input(
            {"type": "http.request", "body": part, "more_body": not last}
        )
    start = await app.receive_output(timeout=20)
    body = b""
    while True:
        message = await app.receive_output(timeout=20)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await app.wait(timeout=5) if not more_after else None
    return start["status"], dict(start["headers"]), body


def openai_error(body: bytes) -> dict[str, Any]:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


# --- make run: no debug page ----------------------------------------------------------


def test_make_run_settings_have_debug_off_unless_asked_and_serve_static():
    """`make run` uses chatsite.settings.dev: DEBUG off by default (the site's own
    404/500 pages), on only with DJANGO_DEBUG=1; static files served either way."""
    probe = (
        "import django; from django.conf import settings; django.setup(); "
        "print(settings.DEBUG, settings.SERVE_STATIC)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env["DJANGO_SETTINGS_MODULE"] = "chatsite.settings.dev"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == ["False", "True"], out.stderr
    env["DJANGO_DEBUG"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == ["True", "True"], out.stderr


# --- the body cap ---------------------------------------------------------------------


async def test_an_api_body_over_the_cap_is_a_413_json_before_it_is_read(settings):
    """The client declares 10 MB and sends 64 KB: the answer comes at once, without
    the rest of the body (Django's own check would wait for all of it)."""
    status, headers, body = await asgi_call(
        "/v1/chat/completions",
        method="POST",
        headers=[
            (b"content-type", b"application/json"),
            (b"content-length", str(10 * MB).encode()),
        ],
        chunks=[b"{" + b" " * 65_536],
        more_after=True,
    )
    assert status == 413
    error = openai_error(body)
    assert error["code"] == "request_too_large"
    assert f"{settings.REQUEST_MAX_BODY_BYTES:,} bytes" in error["message"]


async def test_a_chunked_body_over_the_cap_is_refused_while_it_arrives(settings):
    settings.REQUEST_MAX_BODY_BYTES = 100_000
    status, headers, body = await asgi_call(
        "/v1/chat/completions",
        method="POST",
        headers=[
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
        ],
        chunks=[b"x" * 60_000, b"x" * 60_000],
        more_after=True,
    )
    assert status == 413 and openai_error(body)["code"] == "request_too_large"


async def test_a_large_form_to_the_login_page_is_the_sites_413_page():
    status, headers, body = await asgi_call(
        "/login/",
        method="POST",
        headers=[
            (b"content-type", b"application/x-www-form-urlencoded"),
            (b"content-length", str(3 * MB).encode()),
        ],
        chunks=[b"username=a&password=" + b"b" * 1000],
        more_after=True,
    )
    assert status == 413
    assert headers[b"content-type"].startswith(b"text/html")
    page = body.decode()
    assert "larger than the limit" in page and "Traceback" not in page


async def test_an_upload_address_has_its_files_cap_and_others_the_default(settings):
    from chatsite.bodycap import body_cap

    upload = reverse("document-upload")
    assert body_cap(upload) > settings.MEMORY_UPLOAD_MAX_BYTES
    assert body_cap("/login/") == settings.REQUEST_MAX_BODY_BYTES
    status, _, body = await asgi_call(
        upload,
        method="POST",
        headers=[
            (b"content-type", b"multipart/form-data; boundary=x"),
            (b"content-length", str(30 * MB).encode()),
        ],
        chunks=[b"--x\r\n"],
        more_after=True,
    )
    assert status == 413 and b"larger than the limit" in body


# --- /v1/: every error is OpenAI's JSON ------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_unknown_v1_paths_and_wrong_methods_are_openai_json():
    status, _, body = await asgi_call("/v1/no-such-thing")
    assert status == 404 and openai_error(body)["code"] == "not_found"
    status, headers, body = await asgi_call("/v1/chat/completions", method="GET")
    assert status == 405 and openai_error(body)["type"] == "invalid_request_error"


@pytest.mark.django_db(transaction=True)
async def test_an_unhandled_error_under_v1_is_a_500_in_openai_json(monkeypatch):
    from conversations.openai import views as api_views

    def broken(request: Any) -> Any:
        raise RuntimeError("boom at /srv/secret/settings.py")

    monkeypatch.setattr(api_views, "_api_user", broken)
    status, _, body = await asgi_call(
        "/v1/models", headers=[(b"authorization", b"Bearer sk-anything")]
    )
    assert status == 500
    error = openai_error(body)
    assert error["type"] == "server_error" and "boom" not in error["message"]


# --- HEAD -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_head_answers_wherever_get_does(auth_client, user):
    conv = Conversation.objects.create(user=user, title="t")
    question = Message.objects.create(conversation=conv, role="user", content="q")
    answer = Message.objects.create(
        conversation=conv, role="assistant", content="a", parent=question
    )
    document = Document.objects.create(user=user, title="d", content_type="txt")
    fact = MemoryFact.objects.create(user=user, text="f", embedding=[0.1] * 384)
    values = {
        "conversation_id": str(conv.id),
        "message_id": str(answer.id),
        "document_id": str(document.id),
        "fact_id": str(fact.id),
    }
    checked = 0
    for route in routes():
        if route.name.startswith("admin:") or route.text.startswith("v1/"):
            continue
        try:
            url = url_fill(route, values)
        except Unfillable:
            continue
        got = auth_client.get(url)
        if got.status_code != 200 or getattr(got, "streaming", False):
            continue
        head = auth_client.head(url)
        assert head.status_code == 200, url
        assert head.content == b""
        checked += 1
    assert checked >= 8
    # HEAD is safe: the confirmation pages of deletes deleted nothing
    assert Document.objects.filter(id=document.id).exists()
    assert MemoryFact.objects.filter(id=fact.id).exists()


# --- caps on work a small input could make large ------------------------------------


def test_json_nested_deeper_than_the_cap_is_refused():
    assert json_depth('[{"a": "[[[[[["}, [1, {"b": []}]]') == 4
    assert json_loads_bounded(b"[[[1]]]", max_depth=3) == [[[1]]]
    for text in ["[" * 4 + "]" * 4, "[" * 100_000 + "]" * 100_000]:
        with pytest.raises(InvalidInput) as info:
            json_loads_bounded(text, max_depth=3)
        assert info.value.code == "json_too_deep" and "3 levels" in info.value.message


@pytest.mark.django_db
def test_a_deep_json_body_to_a_chat_endpoint_is_a_400_naming_the_cap(
    auth_client, user, settings
):
    settings.JSON_MAX_DEPTH = 8
    conv = Conversation.objects.create(user=user, title="t")
    answer = Message.objects.create(
        conversation=conv, role="assistant", content="a", status="complete"
    )
    response = auth_client.post(
        reverse("message-feedback", args=[conv.id, answer.id]),
        data=json.dumps({"rating": "up", "comment": [[[[[[[[["x"]]]]]]]]]}),
        content_type="application/json",
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 400
    assert "8 levels" in response.json()["error"]["message"]


def test_a_huge_message_is_shown_as_plain_text_not_parsed(settings):
    settings.CHAT_RENDER_MAX_CHARS = 1000
    short = markdown_to_html("**bold** <b>x</b>")
    assert "<strong>bold</strong>" in short
    long = markdown_to_html("**bold** <b>x</b> " + "![i](http://a/b) " * 100)
    assert long.startswith('<div class="plain-text">')
    assert "<strong>" not in long and "&lt;b&gt;" in long


def test_many_images_render_each_as_a_link():
    html = markdown_to_html("[![a](http://x/1)](http://y/) " + "![b](http://x/2) " * 3)
    assert html.count('href="http://x/2"') == 3
    assert 'href="http://x/1"' not in html  # inside a link: text only


def test_the_remember_request_is_looked_for_only_in_short_messages(settings):
    parse = memory_services.remember_request_parse
    assert parse("  Please remember that I like tea.  ") == "I like tea"
    assert parse("remember   my cat   is Tom \n") == "my cat is Tom"
    long = "remember a" + " " * settings.MEMORY_REMEMBER_MAX_CHARS + "b"
    assert parse(long) is None


@pytest.mark.django_db
def test_an_import_over_the_total_characters_cap_is_refused_and_stores_nothing(
    user, settings
):
    from conversations import exports, services

    conv = Conversation.objects.create(user=user, title="Long")
    Message.objects.create(conversation=conv, role="user", content="x" * 60)
    data = json.dumps(exports.conversations_export_json(user=user)).encode()
    conv.delete()
    settings.CHAT_IMPORT_MAX_TOTAL_CHARS = 50
    with pytest.raises(InvalidInput) as info:
        services.conversations_import(user=user, data=data)
    assert "at most 50 can be imported" in info.value.message
    assert not Conversation.objects.filter(user=user).exists()
    deep = b'{"format": ' + b"[" * 100 + b"]" * 100 + b"}"
    with pytest.raises(InvalidInput) as info:
        services.conversations_import(user=user, data=deep)
    assert "64 levels" in info.value.message

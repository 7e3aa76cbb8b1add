"""Security checks (issue 13): production settings pass ``check --deploy``, CSRF on
every state-changing URL, the admin for staff only, uploaded text never served as
HTML, secrets never compared with ``==``, sign-in and sign-up rate-limited."""

from __future__ import annotations

import ast
import json
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import Conversation, Message
from memory.models import Chunk, Document
from tests import stack
from tests.conftest import make_user
from tests.stack import ROOT
from tests.test_url_ownership import owned, owned_state  # noqa: F401 - a fixture
from tests.urlwalk import routes, url_fill

pytestmark = pytest.mark.django_db

UNSAFE_METHODS = ("post", "put", "patch", "delete")
APPS = ("chatsite", "conversations", "gateway", "memory", "safety", "inference")


def _production_env(**extra: str) -> dict[str, str]:
    """The variables production settings require, with a real-looking secret key."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT / ".var"),
        **stack.test_env(),
        "DJANGO_SETTINGS_MODULE": "chatsite.settings.production",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "chat.example.com",
        "REDIS_URL": "redis://127.0.0.1:1/0",  # never connected to by these checks
        "HF_HUB_OFFLINE": "1",
        **extra,
    }


def _production_settings(**extra: str) -> dict:
    """The security settings as production settings compute them with ``extra`` set."""
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({n: getattr(s, n) for n in ("
        "'DEBUG', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', "
        "'SECURE_SSL_REDIRECT', 'SECURE_PROXY_SSL_HEADER', 'SECURE_HSTS_SECONDS', "
        "'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SECURE_CONTENT_TYPE_NOSNIFF', "
        "'SESSION_COOKIE_HTTPONLY', 'X_FRAME_OPTIONS')}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=_production_env(**extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_check_deploy_with_production_settings_reports_no_issue():
    proc = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=_production_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "System check identified no issues (0 silenced)." in proc.stdout


def test_production_cookies_are_secure_and_https_is_enforced():
    found = _production_settings()
    assert found["DEBUG"] is False
    assert found["SESSION_COOKIE_SECURE"] and found["CSRF_COOKIE_SECURE"]
    assert found["SESSION_COOKIE_HTTPONLY"]
    assert found["SECURE_SSL_REDIRECT"] is True
    assert found["SECURE_HSTS_SECONDS"] >= 31_536_000
    assert found["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is True
    assert found["SECURE_CONTENT_TYPE_NOSNIFF"] is True
    assert found["X_FRAME_OPTIONS"] == "DENY"
    # X-Forwarded-Proto is trusted only when the operator says a proxy sets it
    assert found["SECURE_PROXY_SSL_HEADER"] is None


def test_a_tls_terminating_proxy_is_trusted_only_when_configured():
    found = _production_settings(DJANGO_TRUST_X_FORWARDED_PROTO="1")
    assert found["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]


def test_every_state_changing_request_without_a_csrf_token_is_a_403(owned):  # noqa: F811
    """The owner themself, signed in, without a CSRF token: every POST, PUT, PATCH and
    DELETE to every URL of the site but the API (Bearer keys, no cookies) is refused
    with 403 and changes nothing."""
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    client.force_login(owned["user"])
    before = owned_state(owned)
    messages_before = Message.objects.count()
    checked = 0
    for route in routes():
        if route.text.startswith("v1/"):
            continue
        path = url_fill(route, owned["values"])
        for method in UNSAFE_METHODS:
            response = getattr(client, method)(path, {"content": "x", "title": "y"})
            assert response.status_code == 403, f"{method.upper()} {path}"
            checked += 1
    assert checked > 100
    assert owned_state(owned) == before
    assert Message.objects.count() == messages_before


def test_api_endpoints_take_no_cookies_so_need_no_csrf_token(owned):  # noqa: F811
    """The API authenticates by Bearer key only: a signed-in browser session (what a
    cross-site form would carry) is no credential there, so CSRF cannot reach it."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(owned["user"])
    response = client.post(
        reverse("api-chat-completions"),
        data=json.dumps({"model": "default", "messages": []}),
        content_type="application/json",
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_the_admin_and_the_billing_console_are_for_staff_only(owned):  # noqa: F811
    member = Client()
    member.force_login(owned["user"])
    for url in ("/admin/", reverse("billing-console"), "/admin/conversations/"):
        response = member.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/admin/login/"), url
    staff_user = make_user("staffer")
    staff_user.is_staff = staff_user.is_superuser = True
    staff_user.save()
    staff = Client()
    staff.force_login(staff_user)
    assert staff.get("/admin/").status_code == 200
    assert staff.get(reverse("billing-console")).status_code == 200


def test_uploaded_text_is_shown_escaped_never_served_as_a_file_or_as_html(user):
    """Documents are stored as extracted text and shown inside our own page, escaped;
    no URL serves an uploaded file, and a .html upload is refused."""
    payload = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    document = Document.objects.create(
        user=user,
        title="<b>t</b>.txt",
        content_type="txt",
        status=Document.Status.READY,
        text=payload,
    )
    Chunk.objects.create(
        document=document,
        user=user,
        ord=0,
        text=payload,
        start_char=0,
        end_char=len(payload),
        embedding=[0.1] * 384,
    )
    client = Client()
    client.force_login(user)
    page = client.get(reverse("document-detail", args=[document.id]))
    assert page.status_code == 200
    assert page["Content-Type"].startswith("text/html")
    assert page["X-Content-Type-Options"] == "nosniff"
    body = page.content.decode()
    assert payload not in body and "<script>alert" not in body
    assert "<img src=x" not in body and "<b>t</b>" not in body
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in body
    # no media route: nothing serves an uploaded file back
    assert not any(
        re.search(r"(^|/)(media|downloads?|files?)/|upload.*<", r.text)
        for r in routes()
    )
    before = Document.objects.count()
    refused = client.post(
        reverse("document-upload"),
        {"file": _file("evil.html", b"<script>alert(1)</script>")},
        follow=True,
    )
    assert Document.objects.count() == before
    assert refused.status_code == 200 and b"flash-error" in refused.content


def _file(name: str, data: bytes) -> Any:
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, data, content_type="text/html")


# Names that hold a secret: comparing one with == leaks its prefix through timing.
# (Token *counts* are everywhere and no secret: only names of credentials match.)
_SECRET_NAME = re.compile(
    r"secret|passw|key_hash|raw_key|api_key|metrics_token|auth_token|csrf_token"
    r"|signature|hexdigest\(\)",
    re.IGNORECASE,
)


def _secret_comparisons(path: Path) -> list[str]:
    found = []
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
            continue
        text = ast.unparse(node)
        if _SECRET_NAME.search(text):
            found.append(f"{path}:{node.lineno}: {text}")
    return found


def test_no_secret_is_compared_with_equals():
    """API keys are looked up by their SHA-256 (the database compares hashes, not
    secrets); the metrics token with hmac.compare_digest; no == on a secret anywhere."""
    offenders = [
        hit
        for app in APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if "migrations" not in path.parts
        for hit in _secret_comparisons(path)
    ]
    assert offenders == []
    services = (ROOT / "gateway" / "services.py").read_text()
    assert "key_hash=_key_hash(raw)" in services
    assert "hmac.compare_digest" in (ROOT / "inference" / "views.py").read_text()


def test_the_equals_scan_finds_a_plain_comparison(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def ok(raw_key, stored):\n    return raw_key == stored\n")
    assert len(_secret_comparisons(bad)) == 1


def test_signup_is_rate_limited_per_ip(settings):
    """The N+1-th sign-up POST from one address in the period is a 429 with
    Retry-After and creates no account; another address is not affected."""
    settings.LOGIN_RATE = "3/m"
    url = reverse("signup")
    client = Client(REMOTE_ADDR="10.0.0.7")
    for i in range(3):
        form = {"username": f"u{i}", "password1": "x", "password2": "y"}
        assert client.post(url, form).status_code == 200  # form errors, no account
    good = {
        "username": "late",
        "password1": "a-long-passphrase-42",
        "password2": "a-long-passphrase-42",
    }
    blocked = client.post(url, good)
    assert blocked.status_code == 429
    assert int(blocked["Retry-After"]) == 60
    assert not Conversation.objects.exists()
    from django.contrib.auth import get_user_model

    assert not get_user_model().objects.filter(username="late").exists()
    elsewhere = Client(REMOTE_ADDR="10.0.0.8")
    assert elsewhere.post(url, good).status_code == 302


def test_login_is_rate_limited_per_ip_even_with_the_right_password(settings, user):
    settings.LOGIN_RATE = "5/m"
    client = Client(REMOTE_ADDR="10.0.0.9")
    url = reverse("login")
    for _ in range(5):
        assert client.post(url, {"username": "alice", "password": "no"}).status_code
    blocked = client.post(url, {"username": "alice", "password": "pw-alice-123"})
    assert blocked.status_code == 429 and blocked["Retry-After"] == "60"
    assert "_auth_user_id" not in client.session

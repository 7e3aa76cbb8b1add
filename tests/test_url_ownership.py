"""Every URL of the site, every HTTP method, as another user with the first user's ids
and as an anonymous client: no one reads, changes or deletes what is not theirs.

The URLs come from the URLconf itself (:mod:`tests.urlwalk`), not from a list kept
here: a new URL is walked as soon as it exists, and one whose parameters the walk
cannot fill fails :func:`test_the_walk_fills_every_url_pattern`.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from conversations.models import Conversation, Feedback, Message
from gateway import services as gateway_services
from gateway.models import ApiKey
from memory.models import Document, MemoryFact
from safety.models import ModerationEvent
from tests.conftest import make_user
from tests.urlwalk import Route, Unfillable, routes, url_fill

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")
# Text only user A's objects hold: it must never appear in a response to anyone else.
SECRET = "zebra-7f3a-private"
# A client address outside METRICS_ALLOWED_IPS (loopback), so /metrics is not open to it.
OUTSIDE = "203.0.113.9"
# Fields every form of the site accepts as valid (message, title, rating, fact...).
VALID_FORM = {"content": "hello", "title": "renamed", "rating": "up", "text": "a fact"}
# The admin's pages anyone may see: its sign-in and sign-out.
ADMIN_PUBLIC = {"admin:login", "admin:logout"}


@pytest.fixture
def owned() -> dict[str, Any]:
    """User A and one of each of their objects; ``values`` fills URL parameters."""
    alice = make_user("alice")
    conv = Conversation.objects.create(user=alice, title=f"Title {SECRET}")
    question = Message.objects.create(
        conversation=conv, role=Message.Role.USER, content=f"Question {SECRET}"
    )
    answer = Message.objects.create(
        conversation=conv,
        role=Message.Role.ASSISTANT,
        content=f"Answer {SECRET}",
        status=Message.Status.COMPLETE,
        parent=question,
    )
    Feedback.objects.create(user=alice, message=answer, rating="up", comment=SECRET)
    key, raw = gateway_services.api_key_create(user=alice, name=f"key {SECRET}")
    document = Document.objects.create(
        user=alice,
        title=f"Doc {SECRET}",
        content_type="txt",
        status=Document.Status.READY,
        text=SECRET,
    )
    fact = MemoryFact.objects.create(
        user=alice, text=f"Fact {SECRET}", embedding=[0.1] * 384
    )
    event = ModerationEvent.objects.create(
        user=alice,
        surface="chat",
        direction="input",
        category="weapons",
        score=0.99,
        action="block",
        text=f"Refused {SECRET}",
        backend="embedded",
    )
    # an API answer of A's cut by output moderation (its completion id is appealed)
    cut_job = uuid.uuid4()
    ModerationEvent.objects.create(
        user=alice,
        surface="api",
        direction="output",
        category="weapons",
        score=0.99,
        action="block",
        text=f"Cut {SECRET}",
        job_id=str(cut_job),
        backend="embedded",
    )
    values = {
        "event_id": str(event.pk),
        "completion_id": f"chatcmpl-{cut_job.hex}",
        "conversation_id": str(conv.id),
        "message_id": str(answer.id),
        "key_id": str(key.id),
        "document_id": str(document.id),
        "fact_id": str(fact.id),
        # the admin's and the billing console's (staff only; A's conversation where an
        # object id is asked for)
        "object_id": str(conv.id),
        "content_type_id": "1",
        "app_label": "conversations",
        "table": "usage",
        "url": "no-such-page/",
        "id": str(alice.id),  # the admin's user password form
        "a": "1",  # the eval runs the admin compares
        "b": "2",
    }
    return {
        "user": alice,
        "values": values,
        "conversation": conv,
        "answer": answer,
        "key": key,
        "raw_key": raw,
        "document": document,
        "fact": fact,
    }


def owned_state(owned: dict[str, Any]) -> dict[str, Any]:
    """What user A owns, to compare before and after the walk."""
    conv = Conversation.objects.get(id=owned["conversation"].id)
    return {
        "title": conv.title,
        "messages": list(
            Message.objects.filter(conversation=conv)
            .order_by("created_at")
            .values_list("id", "content", "status")
        ),
        "feedback": list(
            Feedback.objects.filter(user=owned["user"]).values_list("rating", "comment")
        ),
        "key_revoked": ApiKey.objects.get(id=owned["key"].id).revoked_at,
        "document": Document.objects.filter(id=owned["document"].id).exists(),
        "fact": MemoryFact.objects.get(id=owned["fact"].id).text,
    }


def _params(route: Route) -> bool:
    """Whether the route takes a parameter (an object id, a name, a path)."""
    return "<" in route.text or "(?P<" in route.text


def _is_api(route: Route) -> bool:
    return route.text.startswith("v1/")


def test_the_walk_fills_every_url_pattern(owned):
    """Every pattern of the URLconf gets a path that resolves to its own view; a new
    URL with a parameter the walk does not know fails here (add a value above)."""
    walked = routes()
    assert len(walked) > 40  # the admin's, the chat's, the API's...
    names = {r.name for r in walked}
    for expected in ("conversation-detail", "message-stream", "api-key-revoke"):
        assert expected in names
    for route in walked:
        url_fill(route, owned["values"])


def test_an_unknown_parameter_fails_the_walk(owned):
    route = Route(("x/<int:gizmo_id>/",), ("route",), "x", lambda r: None)
    with pytest.raises(Unfillable, match="gizmo_id"):
        url_fill(route, owned["values"])


def test_another_user_gets_404_for_every_url_and_method_with_the_first_users_ids(
    owned, pool_heartbeat
):
    """User B, signed in, calls every URL of the site with every method, with A's
    conversation, message, API key, document and fact ids: what B sees is 404 (or
    405 for a method the URL does not take; the admin sends non-staff to its login
    page), never A's data, never a 500; afterwards A's objects are unchanged."""
    bob = make_user("bob")
    before = owned_state(owned)
    client = Client(REMOTE_ADDR=OUTSIDE, raise_request_exception=False)
    seen: list[str] = []
    for route in routes():
        path = url_fill(route, owned["values"])
        for method in METHODS:
            client.force_login(bob)  # a walked logout/ must not sign B out for good
            # a valid form, so that only ownership can refuse it
            response = getattr(client, method)(path, VALID_FORM)
            where = f"{method.upper()} {path} ({route.name or route.text})"
            seen.append(where)
            assert response.status_code < 500, where
            body = b"" if response.streaming else response.content
            assert SECRET.encode() not in body, f"{where} leaked A's data"
            if route.name in ADMIN_PUBLIC:
                assert response.status_code in (200, 302, 405), where
            elif route.is_admin:
                assert response.status_code in (302, 403, 404, 405), where
                if response.status_code == 302:
                    assert "/admin/login/" in response["Location"], where
            elif _params(route) and not _is_api(route):
                assert response.status_code in (404, 405), (
                    f"{where}: {response.status_code}"
                )
            if response.streaming:
                response.close()
    assert len(seen) == len(routes()) * len(METHODS)
    assert owned_state(owned) == before


def test_anonymous_clients_get_the_login_page_or_a_401_never_data(owned):
    """Signed out: every page and form sends to the login page, the API answers 401
    with its JSON error, /metrics 403 from outside; no response holds A's data."""
    client = Client(REMOTE_ADDR=OUTSIDE, raise_request_exception=False)
    before = owned_state(owned)
    public = {"login", "signup", "logout", *ADMIN_PUBLIC}
    for route in routes():
        path = url_fill(route, owned["values"])
        for method in METHODS:
            response = getattr(client, method)(path)
            where = f"{method.upper()} {path} ({route.name or route.text})"
            assert response.status_code < 500, where
            body = b"" if response.streaming else response.content
            assert SECRET.encode() not in body, f"{where} leaked data"
            code = response.status_code
            if _is_api(route):
                assert code in (401, 405), f"{where}: {code}"
                if code == 401:
                    assert response.json()["error"]["code"] == "invalid_api_key"
            elif route.name == "metrics":
                assert code in (403, 405), f"{where}: {code}"
            elif route.name in public:
                assert code in (200, 302, 405), f"{where}: {code}"
            elif code == 302:
                assert "/login/" in response["Location"], where
            else:
                # a method the view refuses before the login check, or the admin's
                # catch-all
                assert code in (404, 405), f"{where}: {code}"
    assert owned_state(owned) == before


def test_an_api_key_of_another_user_reads_only_its_own_user(owned):
    """B's key lists B's models and cannot reach A's objects (the API takes no ids);
    a revoked or unknown key is 401."""
    bob = make_user("bob")
    _key, raw = gateway_services.api_key_create(user=bob)
    client = Client(raise_request_exception=False)
    ok = client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert ok.status_code == 200 and SECRET not in ok.content.decode()
    gateway_services.api_key_revoke(user=owned["user"], key_id=owned["key"].id)
    revoked = client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {owned['raw_key']}")
    assert revoked.status_code == 401
    fake = client.get(
        "/v1/models", HTTP_AUTHORIZATION=f"Bearer sk-{uuid.uuid4().hex}{'x' * 11}"
    )
    assert fake.status_code == 401
    assert ApiKey.objects.get(id=owned["key"].id).revoked_at <= timezone.now()

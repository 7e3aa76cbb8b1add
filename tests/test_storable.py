"""Input that cannot be stored is refused at the door (chatsite/storable.py): lone
surrogates, NUL and times outside the storable years are a 400 with a clear message on
every writing URL of the URLconf (tests/urlwalk.py), in forms and JSON, and nothing is
stored; an import refuses them too; a time stored before the check (year 10000 in
UTC) no longer breaks the pages, search or exports that read it (chatsite/db.py)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.apps import apps
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatsite.storable import YEAR_MAX, YEAR_MIN, datetime_problem, text_problem
from conversations import exports
from conversations.models import Conversation, Feedback, Message
from tests.test_url_ownership import VALID_FORM, owned  # noqa: F401 - a fixture
from tests.urlwalk import routes, url_fill

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)

# Text no database or encoder can take: a lone surrogate or a NUL somewhere in it.
_poison = st.sampled_from(["\ud800", "\udfff", "\x00", "a\udc80b", "x\x00y"])
unstorable_text = st.tuples(st.text(max_size=8), _poison, st.text(max_size=8)).map(
    "".join
)
_zones = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda m: dt.timezone(dt.timedelta(minutes=m))
)
unstorable_times = st.one_of(
    st.datetimes(min_value=dt.datetime(YEAR_MAX + 1, 1, 1), timezones=_zones),
    st.datetimes(max_value=dt.datetime(YEAR_MIN - 1, 12, 31), timezones=_zones),
    st.just(
        dt.datetime(
            9999, 12, 31, 23, 59, 59, tzinfo=dt.timezone(-dt.timedelta(hours=14))
        )
    ),
)


def _stored() -> dict[str, int]:
    """Rows of every model but sessions (a signed-in test client writes its own)."""
    return {
        model._meta.label: model.objects.count()
        for model in apps.get_models()
        if model._meta.app_label not in ("sessions", "contenttypes", "auth")
        or model._meta.model_name == "user"
    }


def test_the_problems_are_named_and_good_values_pass():
    assert "NUL" in (text_problem("a\x00b") or "")
    assert "surrogate" in (text_problem("a\ud800") or "")
    assert text_problem("héllo 😀") is None
    late = dt.datetime(
        9999, 12, 31, 23, 59, 59, tzinfo=dt.timezone(-dt.timedelta(hours=14))
    )
    assert "outside the years" in (datetime_problem(late) or "")
    assert datetime_problem(dt.datetime(1969, 12, 31, 23, 0, tzinfo=dt.UTC))
    assert datetime_problem(dt.datetime(2026, 1, 1)) is None


# --- findings as reported ------------------------------------------------------------


@pytest.fixture
def answered(user) -> dict[str, Any]:
    conv = Conversation.objects.create(user=user, title="Capitals")
    question = Message.objects.create(
        conversation=conv, role=Message.Role.USER, content="Capital of France?"
    )
    answer = Message.objects.create(
        conversation=conv,
        role=Message.Role.ASSISTANT,
        content="Paris.",
        status=Message.Status.COMPLETE,
        parent=question,
    )
    return {"conversation": conv, "answer": answer}


def test_feedback_with_a_lone_surrogate_is_a_400_and_stores_nothing(
    auth_client, answered
):
    conv, answer = answered["conversation"], answered["answer"]
    body = b'{"rating": "down", "reason": "", "comment": "bad \\ud800 answer"}'
    response = auth_client.post(
        reverse("message-feedback", args=[conv.id, answer.id]),
        data=body,
        content_type="application/json",
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_character" and "surrogate" in error["message"]
    assert not Feedback.objects.exists()


def _export_document(user, conv) -> dict[str, Any]:
    return exports.conversations_export_json(user=user, conversation_id=conv.id)


def _import(client: Client, document: dict[str, Any]) -> Any:
    data = json.dumps(document, ensure_ascii=True).encode()
    return client.post(
        reverse("conversations-import"),
        {"file": SimpleUploadedFile("export.json", data, "application/json")},
        follow=True,
    )


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("content", "a lone \ud800 surrogate", "surrogate"),
        ("created_at", "9999-12-31T23:59:59-14:00", "outside the years"),
        ("created_at", "0001-01-01T00:00:00+00:00", "outside the years"),
    ],
)
def test_an_import_with_a_value_that_cannot_be_stored_is_refused_whole(
    user, auth_client, answered, field, value, said
):
    document = _export_document(user, answered["conversation"])
    document["conversations"][0]["messages"][0][field] = value
    before = _stored()
    response = _import(auth_client, document)
    assert response.status_code == 200
    page = response.content.decode()
    assert said in page and "Nothing was imported" in page
    assert _stored() == before


def test_an_import_with_a_conversation_time_past_year_9999_in_utc_is_refused(
    user, auth_client, answered
):
    document = _export_document(user, answered["conversation"])
    document["conversations"][0]["created_at"] = "9999-12-31T23:59:59-14:00"
    before = _stored()
    response = _import(auth_client, document)
    assert "outside the years" in response.content.decode()
    assert _stored() == before


def test_a_stored_time_past_year_9999_does_not_break_pages_search_or_exports(
    user, auth_client, answered
):
    """A time stored before the check (PostgreSQL holds year 10000; Python cannot) is
    read as the end of the storable range: every page that reads it answers."""
    conv = answered["conversation"]
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE conversations_conversation SET created_at = %s, updated_at = %s "
            "WHERE id = %s",
            ["10000-01-01 13:59:59+00", "infinity", conv.id],
        )
        cursor.execute(
            "UPDATE conversations_message SET created_at = %s WHERE conversation_id = %s",
            ["10000-01-01 13:59:59+00", conv.id],
        )
    conv = Conversation.objects.get(id=conv.id)
    assert conv.created_at.year == YEAR_MAX
    for url, params in [
        (reverse("chat-home"), {}),
        (reverse("conversation-detail", args=[conv.id]), {}),
        (reverse("conversation-thread", args=[conv.id]), {}),
        (reverse("conversation-search"), {"q": "Paris"}),
        (reverse("conversations-export"), {"format": "json"}),
        (reverse("conversations-export"), {"format": "md"}),
        (reverse("conversation-export", args=[conv.id]), {"format": "json"}),
    ]:
        response = auth_client.get(url, params)
        assert response.status_code == 200, (url, params, response.content[:300])


# --- every writing URL of the URLconf ------------------------------------------------


def _writing_paths(values: dict[str, str]) -> list[str]:
    return [url_fill(r, values) for r in routes() if not r.is_admin]


def test_every_writing_url_refuses_unstorable_text_in_forms_and_json(owned):  # noqa: F811
    """Every URL of the site but the admin's (which runs behind the same middleware),
    POST, PUT, PATCH and DELETE, a JSON body whose one field holds a lone surrogate or
    a NUL, or a form or query parameter with a NUL: a 400 ``invalid_character`` naming the problem, nothing
    stored; afterwards the owner's pages and exports still work."""
    client = Client(raise_request_exception=False)
    client.force_login(owned["user"])
    paths = _writing_paths(owned["values"])
    assert len(paths) > 30

    @FUZZ
    @given(
        path=st.sampled_from(paths),
        method=st.sampled_from(["post", "put", "patch", "delete"]),
        field=st.sampled_from(sorted(VALID_FORM) + ["comment", "reason", "q"]),
        value=unstorable_text,
        as_json=st.booleans(),
    )
    def run(path: str, method: str, field: str, value: str, as_json: bool) -> None:
        before = _stored()
        if not as_json:  # UTF-8 form bytes cannot hold a surrogate, only a NUL
            value = value.encode("utf-8", "replace").decode() + "\x00"
        body = {**VALID_FORM, field: value}
        if as_json:
            response = getattr(client, method)(
                path,
                json.dumps(body, ensure_ascii=True),
                content_type="application/json",
                HTTP_ACCEPT="application/json",
            )
        elif method == "post":
            response = client.post(path, body)
        else:
            response = getattr(client, method)(path + "?" + field + "=" + "%00")
        where = (method, path, field, value, as_json)
        assert response.status_code == 400, (where, response.content[:300])
        if not response.streaming:
            assert response.json()["error"]["code"] == "invalid_character", where
        assert _stored() == before, where

    run()
    conv = owned["conversation"]
    for url in (
        reverse("chat-home"),
        reverse("conversation-detail", args=[conv.id]),
        reverse("conversations-export") + "?format=json",
        reverse("memory-page"),
        reverse("account-settings"),
    ):
        assert client.get(url).status_code == 200, url


def test_every_import_refuses_times_out_of_range_and_unstorable_text(
    user, auth_client, answered
):
    base = _export_document(user, answered["conversation"])

    @FUZZ
    @given(
        when=unstorable_times,
        text=unstorable_text,
        where=st.sampled_from(["time", "conversation time", "content", "title"]),
    )
    def run(when: dt.datetime, text: str, where: str) -> None:
        document = json.loads(json.dumps(base))
        conversation = document["conversations"][0]
        if where == "time":
            conversation["messages"][0]["created_at"] = when.isoformat()
        elif where == "conversation time":
            conversation["updated_at"] = when.isoformat()
        elif where == "content":
            conversation["messages"][-1]["content"] = text
        else:
            conversation["title"] = text
        before = _stored()
        response = _import(auth_client, document)
        assert response.status_code == 200
        assert "Nothing was imported" in response.content.decode(), (where, when, text)
        assert _stored() == before

    run()
    assert (
        auth_client.get(reverse("conversations-export"), {"format": "json"}).status_code
        == 200
    )


@pytest.mark.django_db(transaction=True)
def test_the_check_holds_under_asgi_too(user, answered):
    """The middleware's async path (the site runs under uvicorn, an ASGI server)."""
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    conv, answer = answered["conversation"], answered["answer"]
    client = AsyncClient()
    client.force_login(user)
    response = async_to_sync(client.post)(
        reverse("message-feedback", args=[conv.id, answer.id]),
        b'{"rating": "up", "comment": "\\udfff"}',
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_character"
    assert not Feedback.objects.exists()

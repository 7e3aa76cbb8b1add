"""The session's user is read with their subscribed plan (gateway.selectors.PLAN_ID_ATTR,
in safety.backends' one user query): admission asks no query of its own for it, and
a subscription changed anywhere applies to the user's next request."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from gateway import selectors
from gateway.billing import services as billing_services
from safety.backends import SessionUserBackend
from tests.gateway import factories

pytestmark = pytest.mark.django_db


def test_the_plan_id_comes_with_the_user_in_one_query(user, settings):
    pro = factories.plan("pro", pools=[factories.pool("p1")])
    factories.subscribe(user, pro)
    selectors.gateway_config()  # this test's pools-and-plans snapshot (the tests': 0 s)
    settings.GATEWAY_CONFIG_CACHE_S = 60  # ... kept from here on
    with CaptureQueriesContext(connection) as queries:
        read = SessionUserBackend().get_user(str(user.pk))
        assert selectors.plan_for_user(user=read) == pro
    assert len(queries.captured_queries) == 1
    assert getattr(read, selectors.PLAN_ID_ATTR) == pro.pk


def test_a_user_without_a_subscription_reads_the_default_plan(user, settings):
    default = selectors.gateway_config().default_plan  # the seeded one, if any
    settings.GATEWAY_CONFIG_CACHE_S = 60
    read = SessionUserBackend().get_user(user.pk)
    assert getattr(read, selectors.PLAN_ID_ATTR) is None
    with CaptureQueriesContext(connection) as queries:
        plan = selectors.plan_for_user(user=read)
    assert queries.captured_queries == []
    assert plan.name == (default.name if default else "unlimited")


def test_a_changed_subscription_applies_to_the_next_request(user, settings):
    settings.GATEWAY_CONFIG_CACHE_S = 0  # plans read fresh: only the plan id matters
    factories.subscribe(user, factories.plan("starter"))
    factories.plan("team")
    client = Client()
    client.force_login(user)
    first = client.get(reverse("chat-home")).wsgi_request.user
    assert selectors.plan_for_user(user=first).name == "starter"
    billing_services.subscription_assign(user=user, plan_name="team")
    second = client.get(reverse("chat-home")).wsgi_request.user
    assert selectors.plan_for_user(user=second).name == "team"


def test_assigning_a_plan_to_the_request_s_own_user_applies_at_once(user):
    factories.subscribe(user, factories.plan("starter"))
    factories.plan("team")
    read = SessionUserBackend().get_user(user.pk)
    billing_services.subscription_assign(user=read, plan_name="team")
    assert selectors.plan_for_user(user=read).name == "team"


def test_a_user_loaded_elsewhere_still_reads_their_plan(user, django_user_model):
    factories.subscribe(user, factories.plan("pro"))
    loaded = django_user_model.objects.get(pk=user.pk)  # not the session's read
    assert not hasattr(loaded, selectors.PLAN_ID_ATTR)
    assert selectors.plan_for_user(user=loaded).name == "pro"

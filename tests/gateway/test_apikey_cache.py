"""The per-process cache of API key lookups (gateway/apikey_cache.py)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from chatsite.errors import Suspended
from gateway import apikey_cache, selectors, services
from gateway.models import ApiKey
from safety import selectors as safety_selectors
from safety import suspensions
from tests.gateway import factories

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _cache_on(settings):
    settings.GATEWAY_API_KEY_CACHE_S = 60.0
    apikey_cache.apikey_forget()
    yield
    apikey_cache.apikey_forget()


def _refused_within(raw: str, bound_s: float) -> float:
    """Poll authentication until the key is refused; return the seconds it took
    (fails the test past ``bound_s`` + 1 s of slack for a busy machine)."""
    started = time.monotonic()
    while services.api_key_authenticate(raw=raw) is not None:
        assert time.monotonic() - started < bound_s + 1.0, "still accepted"
        time.sleep(0.02)
    return time.monotonic() - started


def test_a_cached_key_admits_with_no_query(user, django_assert_num_queries, settings):
    factories.subscribe(user, factories.plan("pro", pools=[factories.pool("p1")]))
    _key, raw = services.api_key_create(user=user)
    # warm: the key (and its last_used_at stamp), this test's pools-and-plans snapshot
    selectors.plan_for_user(user=services.api_key_authenticate(raw=raw))
    settings.GATEWAY_CONFIG_CACHE_S = 60
    with django_assert_num_queries(0):
        found = services.api_key_authenticate(raw=raw)
        safety_selectors.suspension_check(user=found)
        assert selectors.plan_for_user(user=found).name == "pro"
    assert found == user


def test_each_request_gets_its_own_user(user):
    _key, raw = services.api_key_create(user=user)
    first = services.api_key_authenticate(raw=raw)
    second = services.api_key_authenticate(raw=raw)
    assert first == second == user
    assert first is not second
    first.first_name = "changed by one request"
    assert services.api_key_authenticate(raw=raw).first_name == user.first_name


def test_a_key_revoked_through_the_service_stops_at_once(user):
    key, raw = services.api_key_create(user=user)
    assert services.api_key_authenticate(raw=raw) == user
    services.api_key_revoke(key_id=key.pk)
    assert services.api_key_authenticate(raw=raw) is None


def test_a_key_revoked_by_another_process_stops_within_the_bound(user, settings):
    settings.GATEWAY_API_KEY_CACHE_S = 0.5
    key, raw = services.api_key_create(user=user)
    assert services.api_key_authenticate(raw=raw) == user
    # another process revoked it: this one's cache does not know
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    assert services.api_key_authenticate(raw=raw) == user
    assert _refused_within(raw, settings.GATEWAY_API_KEY_CACHE_S) <= 1.5


def test_a_deactivated_user_is_refused_within_the_bound(user, settings):
    settings.GATEWAY_API_KEY_CACHE_S = 0.5
    _key, raw = services.api_key_create(user=user)
    assert services.api_key_authenticate(raw=raw) == user
    type(user).objects.filter(pk=user.pk).update(is_active=False)
    assert _refused_within(raw, settings.GATEWAY_API_KEY_CACHE_S) <= 1.5


def test_a_suspension_applies_within_the_bound(user, settings):
    settings.GATEWAY_API_KEY_CACHE_S = 0.5
    _key, raw = services.api_key_create(user=user)
    safety_selectors.suspension_check(user=services.api_key_authenticate(raw=raw))
    suspensions.suspension_create(
        user=user,
        until=timezone.now() + timedelta(hours=1),
        reason="Spam",
        actor=None,
        actor_label="test",
    )
    started = time.monotonic()
    while True:
        try:
            safety_selectors.suspension_check(
                user=services.api_key_authenticate(raw=raw)
            )
        except Suspended:
            break
        assert time.monotonic() - started < 1.5, "still admitted"
        time.sleep(0.02)


def test_a_plan_move_applies_within_the_bound(user, settings):
    settings.GATEWAY_API_KEY_CACHE_S = 0.5
    pool = factories.pool("p1")
    factories.subscribe(user, factories.plan("starter", pools=[pool]))
    _key, raw = services.api_key_create(user=user)
    found = services.api_key_authenticate(raw=raw)
    assert selectors.plan_for_user(user=found).name == "starter"
    factories.subscribe(user, factories.plan("pro", pools=[pool]))
    started = time.monotonic()
    while selectors.plan_for_user(user=services.api_key_authenticate(raw=raw)).name != (
        "pro"
    ):
        assert time.monotonic() - started < 1.5, "still on the old plan"
        time.sleep(0.02)


def test_the_cache_holds_at_most_its_entries(user, settings):
    settings.GATEWAY_API_KEY_CACHE_ENTRIES = 2
    raws = [services.api_key_create(user=user)[1] for _ in range(3)]
    for raw in raws:
        assert services.api_key_authenticate(raw=raw) == user
    assert len(apikey_cache._entries) <= 2


def test_nothing_is_cached_when_the_bound_is_zero(user, settings):
    settings.GATEWAY_API_KEY_CACHE_S = 0
    key, raw = services.api_key_create(user=user)
    assert services.api_key_authenticate(raw=raw) == user
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    assert services.api_key_authenticate(raw=raw) is None


def _until(condition, bound_s: float = 5.0) -> None:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < bound_s, "condition never met"
        time.sleep(0.01)


def _fake_key(pk: int) -> SimpleNamespace:
    return SimpleNamespace(pk=pk, user=SimpleNamespace(pk=pk), last_used_at=None)


@pytest.fixture
def _short_bound(settings):
    settings.GATEWAY_API_KEY_CACHE_S = 1.0


@pytest.mark.usefixtures("_short_bound")
def test_an_entry_past_half_its_bound_is_refreshed_in_the_background():
    apikey_cache.apikey_remember("h", key=_fake_key(1), suspended=False)
    calls: list[str] = []

    def lookup():
        calls.append(threading.current_thread().name)
        return _fake_key(2), True

    # answered from the entry until the refresh replaced it; looked up once, elsewhere
    _until(lambda: apikey_cache.apikey_cached("h", refresh=lookup)[0].pk == 2)
    key, _user, suspended = apikey_cache.apikey_cached("h")
    assert (key.pk, suspended) == (2, True)
    assert len(calls) == 1 and calls[0] != threading.current_thread().name


@pytest.mark.usefixtures("_short_bound")
def test_a_refresh_that_finds_no_active_key_drops_the_entry():
    apikey_cache.apikey_remember("h", key=_fake_key(1), suspended=False)
    _until(lambda: apikey_cache.apikey_cached("h", refresh=lambda: None) is None)


@pytest.mark.usefixtures("_short_bound")
def test_a_key_forgotten_during_its_refresh_stays_forgotten():
    apikey_cache.apikey_remember("h", key=_fake_key(1), suspended=False)
    started, release = threading.Event(), threading.Event()

    def lookup():
        started.set()
        release.wait(5)
        return _fake_key(1), False

    _until(lambda: apikey_cache.apikey_cached("h", refresh=lookup) and started.is_set())
    apikey_cache.apikey_forget("h")  # e.g. revoked through the service
    release.set()
    _until(lambda: not apikey_cache.apikey_refreshing("h"))
    assert apikey_cache.apikey_cached("h") is None


@pytest.mark.usefixtures("_short_bound")
def test_a_failed_refresh_leaves_the_entry_to_expire():
    apikey_cache.apikey_remember("h", key=_fake_key(1), suspended=False)

    def lookup():
        raise RuntimeError("database down")

    _until(
        lambda: (
            apikey_cache.apikey_refreshing("h")
            or apikey_cache.apikey_cached("h", refresh=lookup) is None
        )
    )
    _until(lambda: not apikey_cache.apikey_refreshing("h"))
    _until(lambda: apikey_cache.apikey_cached("h") is None)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_short_bound")
def test_a_key_revoked_elsewhere_is_dropped_by_the_refresh(user):
    key, raw = services.api_key_create(user=user)
    assert services.api_key_authenticate(raw=raw) == user
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    assert _refused_within(raw, 1.0) <= 1.5


@pytest.mark.django_db(transaction=True)
def test_a_key_in_steady_use_is_not_looked_up_inline_again(
    user, settings, django_assert_num_queries
):
    settings.GATEWAY_API_KEY_CACHE_S = 2.0
    _key, raw = services.api_key_create(user=user)
    services.api_key_authenticate(raw=raw)  # the first lookup and last_used_at stamp
    first_loaded = next(iter(apikey_cache._entries.values())).loaded_at
    # past the first lookup's bound, every request answered from the cache: the
    # lookups ran on the refresh thread
    with django_assert_num_queries(0):
        while time.monotonic() < first_loaded + 2.2:
            assert services.api_key_authenticate(raw=raw) == user
            time.sleep(0.02)

"""The site's Django cache (chatsite/cache.py): django-ratelimit's counts in its
``ratelimit`` alias are the library's counts on Django's cache, one round trip each."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import redis
from django.contrib.auth.models import AnonymousUser
from django.core.cache import caches
from django.test import RequestFactory
from django_ratelimit.core import get_usage

from chatsite.cache import RateCountRedisCache

pytestmark = pytest.mark.django_db


def _usage(settings: Any, alias: str, group: str, *, increment: bool) -> Any:
    settings.RATELIMIT_USE_CACHE = alias
    request = RequestFactory().post("/")
    request.user = AnonymousUser()
    return get_usage(request, group=group, key="ip", rate="3/m", increment=increment)


def test_ratelimit_counts_as_on_djangos_cache(settings):
    """Counted and read-only calls give the same counts, limits and windows in the
    ``ratelimit`` alias as in the default cache (Django's add, incr and get)."""
    assert isinstance(caches["ratelimit"], RateCountRedisCache)
    steps = [True, True, False, True, True, False, True]
    # the library's clock held still: its time_left is whole seconds to the window's
    # end, so a second boundary between the two runs would differ by one
    clock = mock.Mock(time=mock.Mock(return_value=1_700_000_000.5))
    with mock.patch("django_ratelimit.core.time", clock):
        ours = [_usage(settings, "ratelimit", "ours", increment=s) for s in steps]
        djangos = [_usage(settings, "default", "djangos", increment=s) for s in steps]
    assert [u["count"] for u in ours] == [1, 2, 2, 3, 4, 4, 5]
    assert [u["count"] for u in ours] == [u["count"] for u in djangos]
    assert [u["should_limit"] for u in ours] == [u["should_limit"] for u in djangos]
    assert [u["time_left"] for u in ours] == [u["time_left"] for u in djangos]


def test_a_read_before_any_count_is_zero(settings):
    assert _usage(settings, "ratelimit", "fresh", increment=False)["count"] == 0
    assert _usage(settings, "ratelimit", "fresh", increment=True)["count"] == 1


def test_each_count_is_one_round_trip(settings):
    _usage(settings, "ratelimit", "trips", increment=True)  # loads the script
    with mock.patch.object(
        redis.Redis,
        "execute_command",
        autospec=True,
        side_effect=redis.Redis.execute_command,
    ) as sent:
        counts = [
            _usage(settings, "ratelimit", "trips", increment=True)["count"]
            for _ in range(3)
        ]
    assert counts == [2, 3, 4]
    assert [call.args[1] for call in sent.call_args_list] == ["EVALSHA"] * 3


def test_the_counted_value_answers_only_the_call_after_it_on_its_key():
    cache = caches["ratelimit"]
    cache.set("a", 5, 60)
    cache.set("b", 7, 60)
    assert cache.add("a", 1, 60) is False  # counted: a is 6
    assert cache.incr("b") == 8  # another key: Django's incr, and the slot is gone
    assert cache.incr("a") == 7
    assert cache.add("a", 0, 60) is False
    assert cache.get("a") == 7
    assert cache.get("a") == 7


def test_other_adds_are_djangos():
    cache = caches["ratelimit"]
    assert cache.add("word", "x", 60) is True
    assert cache.add("word", "y", 60) is False
    assert cache.get("word") == "x"
    assert cache.add("two", 2, 60) is True
    assert cache.add("two", 2, 60) is False
    assert cache.get("two") == 2
    assert cache.add("forever", 1, None) is True
    assert cache.add("forever", 1, None) is False
    assert cache.get("forever") == 1
    with pytest.raises(ValueError):
        cache.incr("missing")


def test_a_new_count_expires_with_the_window():
    cache = caches["ratelimit"]
    assert cache.add("window", 1, 90) is True
    client = cache._cache.get_client(write=True)
    assert 85 <= client.ttl(cache.make_key("window")) <= 90

"""chatsite.http.uuid_url and uuid_urls: the URLs of UUID-argument routes, filled into a template
reversed once, equal Django's reverse() (under a script prefix too)."""

from __future__ import annotations

import uuid

import pytest
from django.urls import NoReverseMatch, clear_script_prefix, reverse, set_script_prefix

from chatsite.http import uuid_url, uuid_urls

NAMES_ONE = ["conversation-detail", "conversation-thread"]
NAMES_TWO = [
    "message-edit",
    "message-regenerate-one",
    "message-stream",
    "message-stop",
    "message-feedback",
]


@pytest.mark.parametrize("prefix", ["/", "/chat/"])
def test_each_route_s_url_is_reverse_s(prefix):
    set_script_prefix(prefix)
    try:
        for _ in range(2):  # the template's first build, then its reuse
            a, b = uuid.uuid4(), uuid.uuid4()
            for name in NAMES_ONE:
                assert uuid_url(name, a) == reverse(name, args=[a])
            for name in NAMES_TWO:
                assert uuid_url(name, a, b) == reverse(name, args=[a, b])
                assert uuid_url(name, str(a), str(b)) == reverse(name, args=[a, b])
    finally:
        clear_script_prefix()


def test_a_non_uuid_id_or_an_unknown_route_is_refused():
    with pytest.raises(ValueError):
        uuid_url("conversation-detail", "../admin/")
    with pytest.raises(NoReverseMatch):
        uuid_url("no-such-route", uuid.uuid4())


@pytest.mark.parametrize("prefix", ["/", "/chat/"])
def test_many_urls_at_once_are_each_reverse_s_in_order(prefix):
    set_script_prefix(prefix)
    try:
        a, b = uuid.uuid4(), uuid.uuid4()
        specs = [(name, (a,)) for name in NAMES_ONE]
        specs += [(name, (a, b)) for name in NAMES_TWO]
        specs += [("message-stream", (str(b), str(a)))]  # text ids, swapped
        expected = [reverse(name, args=[a]) for name in NAMES_ONE]
        expected += [reverse(name, args=[a, b]) for name in NAMES_TWO]
        expected += [reverse("message-stream", args=[b, a])]
        assert uuid_urls(specs) == expected
    finally:
        clear_script_prefix()


def test_many_urls_refuse_a_non_uuid_id():
    with pytest.raises(ValueError):
        uuid_urls(
            [("conversation-detail", (uuid.uuid4(),)), ("message-stop", ("x", "y"))]
        )

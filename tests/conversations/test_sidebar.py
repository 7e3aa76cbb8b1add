"""The sidebar's chat list (conversations/sidebar.py, context_processors.py,
templates/_sidebar_conversations.html): on every signed-in page, grouped by the day
of last activity (site time zone), bounded, one query however many conversations."""

from __future__ import annotations

import datetime as dt

import lxml.html
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from conversations.models import Conversation
from conversations.sidebar import (
    OLDER,
    TODAY,
    WEEK,
    YESTERDAY,
    group_title,
    sidebar_conversations,
)

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 3, 10, 12, 0, tzinfo=dt.UTC)

# every signed-in page of the site's navigation (the chat with and without a chat)
PAGES = [
    ("chat-home", False),
    ("conversation-detail", True),
    ("conversation-search", False),
    ("document-list", False),
    ("memory-page", False),
    ("account-settings", False),
    ("conversations-import", False),
]


def conv(user, title, *, ago, **fields):
    at = timezone.now() - ago
    return Conversation.objects.create(
        user=user, title=title, created_at=at, updated_at=at, **fields
    )


def sidebar_of(response):
    """The page's chat list: [(group title, [(link text, classes, aria-current)])]."""
    tree = lxml.html.fromstring(response.content.decode())
    (nav,) = tree.xpath('//nav[@id="conversation-list"]')
    assert nav.get("aria-label") == "Conversations"
    return [
        (
            section.xpath('./h2[@class="conv-group-title"]')[0].text_content(),
            [
                (a.text_content(), a.get("class"), a.get("aria-current"))
                for a in section.xpath("./a")
            ],
        )
        for section in nav.xpath('./section[@class="conv-group"]')
    ]


@pytest.mark.parametrize(
    ("days", "group"),
    [(-1, TODAY), (0, TODAY), (1, YESTERDAY), (2, WEEK), (7, WEEK), (8, OLDER)],
)
def test_group_title_by_days_ago(days, group):
    today = dt.date(2026, 3, 10)
    assert group_title(day=today - dt.timedelta(days=days), today=today) == group


def test_conversations_are_grouped_by_the_local_day_of_their_last_activity(
    user, other_user, settings
):
    settings.TIME_ZONE = "UTC"
    for title, at in [
        ("this morning", NOW.replace(hour=0, minute=5)),
        ("last night", NOW.replace(hour=0) - dt.timedelta(minutes=5)),
        ("three days ago", NOW - dt.timedelta(days=3)),
        ("a week ago", NOW - dt.timedelta(days=7)),
        ("last month", NOW - dt.timedelta(days=30)),
    ]:
        Conversation.objects.create(user=user, title=title, updated_at=at)
    Conversation.objects.create(user=user, title="archived", archived=True)
    Conversation.objects.create(user=other_user, title="not mine", updated_at=NOW)
    sidebar = sidebar_conversations(user=user, now=NOW)
    assert [(g.title, [e.title for e in g.entries]) for g in sidebar.groups] == [
        (TODAY, ["this morning"]),
        (YESTERDAY, ["last night"]),
        (WEEK, ["three days ago", "a week ago"]),
        (OLDER, ["last month"]),
    ]
    assert not sidebar.more


def test_days_are_the_sites_time_zone(user, settings):
    # 23:30 UTC on the 9th is already the 10th in Tokyo (UTC+9)
    Conversation.objects.create(
        user=user, title="late", updated_at=NOW.replace(day=9, hour=23, minute=30)
    )
    settings.TIME_ZONE = "UTC"
    assert sidebar_conversations(user=user, now=NOW).groups[0].title == YESTERDAY
    settings.TIME_ZONE = "Asia/Tokyo"
    assert sidebar_conversations(user=user, now=NOW).groups[0].title == TODAY


def test_the_list_is_bounded_and_says_there_are_more(user, settings):
    settings.CHAT_SIDEBAR_CONVERSATIONS = 3
    for i in range(5):
        conv(user, f"chat {i}", ago=dt.timedelta(minutes=i))
    sidebar = sidebar_conversations(user=user)
    assert [e.title for g in sidebar.groups for e in g.entries] == [
        "chat 0",
        "chat 1",
        "chat 2",
    ]
    assert sidebar.more
    settings.CHAT_SIDEBAR_CONVERSATIONS = 5
    assert not sidebar_conversations(user=user).more


@pytest.mark.parametrize(("name", "with_conversation"), PAGES)
def test_every_signed_in_page_shows_the_grouped_list(
    auth_client, user, name, with_conversation
):
    active = conv(user, "Kept today", ago=dt.timedelta(minutes=1))
    conv(user, "From last week", ago=dt.timedelta(days=4))
    args = [active.id] if with_conversation else []
    response = auth_client.get(reverse(name, args=args))
    assert response.status_code == 200
    current = "page" if with_conversation else None
    classes = "conv-link active" if with_conversation else "conv-link"
    assert sidebar_of(response) == [
        (TODAY, [("Kept today", classes, current)]),
        (WEEK, [("From last week", "conv-link", None)]),
    ]


@pytest.mark.parametrize("name", [name for name, with_id in PAGES if not with_id])
def test_a_page_without_conversations_says_so(auth_client, name):
    tree = lxml.html.fromstring(auth_client.get(reverse(name)).content.decode())
    (empty,) = tree.xpath('//nav[@id="conversation-list"]/p[@id="no-conversations"]')
    assert empty.get("class") == "empty"


def test_titles_are_escaped(auth_client, user):
    conv(user, "<b>bold</b> & co", ago=dt.timedelta(0))
    body = auth_client.get(reverse("document-list")).content.decode()
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; co" in body


def test_more_conversations_than_listed_link_to_all_chats(auth_client, user, settings):
    settings.CHAT_SIDEBAR_CONVERSATIONS = 2
    for i in range(3):
        conv(user, f"chat {i}", ago=dt.timedelta(minutes=i))
    tree = lxml.html.fromstring(auth_client.get(reverse("memory-page")).content)
    (more,) = tree.xpath('//nav[@id="conversation-list"]/a[@class="conv-more"]')
    assert more.get("href") == reverse("conversation-search")
    settings.CHAT_SIDEBAR_CONVERSATIONS = 3
    tree = lxml.html.fromstring(auth_client.get(reverse("memory-page")).content)
    assert not tree.xpath('//a[@class="conv-more"]')


@pytest.mark.parametrize("name", ["document-list", "chat-home"])
def test_the_list_costs_one_query_however_many_conversations(auth_client, user, name):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert auth_client.get(reverse(name)).status_code == 200
        return sum("conversations_conversation" in q["sql"] for q in captured)

    conv(user, "one", ago=dt.timedelta(0))
    few = queries()
    for i in range(40):
        conv(user, f"chat {i}", ago=dt.timedelta(days=i))
    assert queries() == few


def test_the_list_is_read_in_one_query(user, django_assert_num_queries):
    for i in range(30):
        conv(user, f"chat {i}", ago=dt.timedelta(days=i))
    with django_assert_num_queries(1):
        sidebar = sidebar_conversations(user=user)
        assert sum(len(g.entries) for g in sidebar.groups) == 30


def test_anonymous_pages_have_no_list(client):
    body = client.get(reverse("login")).content.decode()
    assert 'id="conversation-list"' not in body


def test_the_quota_stays_on_the_chat_page(auth_client):
    assert 'id="quota"' in auth_client.get(reverse("chat-home")).content.decode()

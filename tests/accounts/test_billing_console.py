"""The billing console's admin pages (accounts/billing/views.py, charts.py): charts for
an empty range and with data, the tables, CSV export, the date filter, who may see it."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from decimal import Decimal

import pytest
from django.urls import reverse

from accounts.billing import charts
from gateway.models import UsageRecord
from tests.conftest import make_user
from tests.gateway import factories

pytestmark = pytest.mark.django_db

URL = "/admin/billing/"
NOVEMBER = {"start": "2026-11-01", "end": "2026-11-30"}


@pytest.fixture
def admin_client(client, django_user_model):
    boss = django_user_model.objects.create_superuser("boss", "b@x.test", "pw-boss-1")
    client.force_login(boss)
    return client


def record(user, job: str, *, day: int, model: str, tokens: int, cost: str, **extra):
    return UsageRecord.objects.create(
        user=user,
        job_id=job,
        pool=extra.pop("pool", "default"),
        model=model,
        prompt_tokens=tokens,
        completion_tokens=0,
        cost=Decimal(cost),
        status=extra.pop("status", "complete"),
        created_at=dt.datetime(2026, 11, day, 12, tzinfo=dt.UTC),
        **extra,
    )


@pytest.fixture
def usage():
    pro = factories.plan("pro", monthly_token_budget=10_000)
    ann, bob = make_user("ann"), make_user("bob")
    factories.subscribe(bob, pro)
    record(ann, "1", day=3, model="m-a", tokens=1500, cost="1.5", ttft_ms=100)
    record(bob, "2", day=3, model="m-b", tokens=500, cost="4", ttft_ms=300)
    record(bob, "3", day=7, model="m-b", tokens=2000, cost="2", status="error")
    return ann, bob


def _console_html(response) -> str:
    """The part of the page the console adds (the admin's own frame left out)."""
    html = response.content.decode()
    return html[html.index('class="billing-console"') : html.index('id="footer"')]


def test_the_admin_index_links_to_the_console(admin_client):
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert f'href="{URL}"' in page and "Billing console" in page


def test_charts_with_data_show_the_numbers(admin_client, usage):
    response = admin_client.get(URL, NOVEMBER)
    assert response.status_code == 200
    html = _console_html(response)
    tokens_day, cost_day, tokens_model, cost_model = response.context["charts"]
    assert len(tokens_day.bars) == 30 and not tokens_day.empty
    assert "<title>2026-11-03: 2,000 tokens</title>" in html
    assert "<title>2026-11-07: 2,000 tokens</title>" in html
    assert "<title>2026-11-04: 0 tokens</title>" in html
    assert "<title>2026-11-03: 5.50</title>" in html  # cost per day
    assert "<title>m-b: 2,500 tokens</title>" in html
    assert "<title>m-a: 1.50</title>" in html
    # the scale: steps of 500 tokens up to 2,000, the tallest bar fills the plot
    assert [t.text for t in tokens_day.ticks] == ["0", "500", "1k", "1.5k", "2k"]
    assert [t.text for t in cost_day.ticks] == ["0", "2", "4", "6"]
    heights = {b.title: float(b.height) for b in tokens_day.bars}
    plot = charts.HEIGHT - charts.MARGIN_TOP - charts.MARGIN_BOTTOM
    assert heights["2026-11-03: 2,000 tokens"] == pytest.approx(plot)
    assert [b.title for b in tokens_model.bars] == [
        "m-b: 2,500 tokens",  # the most cost first
        "m-a: 1,500 tokens",
    ]
    assert "3 requests, 4000 tokens, cost 7.5" in html.replace(".000000", "")
    # works under the CSP: no inline script or style in what the console adds
    assert "<script" not in html and "style=" not in html


def test_charts_render_for_an_empty_range(admin_client, usage):
    response = admin_client.get(URL, {"start": "2020-01-01", "end": "2020-01-31"})
    assert response.status_code == 200
    html = _console_html(response)
    assert html.count("No usage in this range</text>") == 4
    tokens_day = response.context["charts"][0]
    assert tokens_day.empty and len(tokens_day.bars) == 31
    assert {b.height for b in tokens_day.bars} == {"0.0"}
    assert [t.text for t in tokens_day.ticks] == ["0"]
    assert response.context["charts"][2].bars == []  # no model at all
    assert html.count("<svg") == 4
    assert "No usage in this range.</td>" in html


def test_the_default_range_is_the_last_30_days(admin_client):
    response = admin_client.get(URL)
    assert response.status_code == 200
    period = response.context["period"]
    assert (period.end - period.start).days == 29
    assert len(response.context["charts"][0].bars) == 30


def test_the_tables_list_top_users_with_plan_and_pool_load(admin_client, usage):
    response = admin_client.get(URL, NOVEMBER)
    tables = {t["name"]: t for t in response.context["tables"]}
    users = tables["users"]
    assert users["headers"][:5] == [
        "username",
        "plan",
        "requests",
        "total_tokens",
        "cost",
    ]
    assert [row[:3] for row in users["rows"]] == [["bob", "pro", 2], ["ann", "free", 1]]
    assert users["rows"][0][7:9] == [10_000, 10_000]  # month limit, remaining
    pools = tables["pools"]["rows"]
    assert pools == [["default", 3, 1, 0.3333, 200.0, 298.0, 4000]]
    assert tables["days"]["csv_url"] == (
        "/admin/billing/days.csv?start=2026-11-01&end=2026-11-30"
    )
    html = _console_html(response)
    assert 'href="/admin/billing/users.csv?start=2026-11-01&amp;end=2026-11-30"' in html


@pytest.mark.parametrize(
    ("table", "header", "rows"),
    [
        ("models", ["model", "requests"], [["m-b", "2"], ["m-a", "1"]]),
        ("users", ["username", "plan"], [["bob", "pro"], ["ann", "free"]]),
        ("pools", ["pool", "requests"], [["default", "3"]]),
    ],
)
def test_each_table_exports_as_csv_with_the_same_range(
    admin_client, usage, table, header, rows
):
    response = admin_client.get(f"{URL}{table}.csv", NOVEMBER)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert f"billing-{table}-20261101-20261130.csv" in response["Content-Disposition"]
    lines = list(csv.reader(io.StringIO(response.content.decode())))
    assert lines[0][:2] == header
    assert [line[:2] for line in lines[1:]] == rows


def test_the_days_csv_has_every_day_with_tokens_and_cost(admin_client, usage):
    response = admin_client.get(f"{URL}days.csv", NOVEMBER)
    lines = list(csv.reader(io.StringIO(response.content.decode())))
    assert lines[0] == [
        "day",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "cost",
    ]
    assert len(lines) == 31
    assert lines[3][:5] == ["2026-11-03", "2", "2000", "0", "2000"]
    assert Decimal(lines[3][5]) == Decimal("5.5")
    empty = admin_client.get(
        f"{URL}days.csv", {"start": "2020-01-01", "end": "2020-01-02"}
    )
    assert list(csv.reader(io.StringIO(empty.content.decode())))[1][1:5] == [
        "0",
        "0",
        "0",
        "0",
    ]


def test_an_unknown_table_is_404(admin_client):
    assert admin_client.get(f"{URL}secrets.csv").status_code == 404


@pytest.mark.parametrize(
    ("params", "says"),
    [
        (
            {"start": "2026-02-30"},
            "The start date &#x27;2026-02-30&#x27; is not a date",
        ),
        ({"start": "2026-11-05", "end": "2026-11-01"}, "is after the end date"),
        ({"end": "soon"}, "The end date &#x27;soon&#x27; is not a date"),
    ],
)
def test_a_bad_date_shows_a_clear_message_not_an_error_page(admin_client, params, says):
    response = admin_client.get(URL, params)
    assert response.status_code == 400
    html = _console_html(response)
    assert says in html and 'class="errornote"' in html
    assert "<svg" not in html
    exported = admin_client.get(f"{URL}days.csv", params)
    assert exported.status_code == 400
    assert (
        "YYYY-MM-DD" in exported.content.decode()
        or "after" in exported.content.decode()
    )


def test_anonymous_and_non_staff_users_are_sent_to_the_login(client):
    for path in (URL, f"{URL}days.csv"):
        response = client.get(path)
        assert response.status_code == 302
        assert "login" in response["Location"]
        assert f"next={path}" in response["Location"]
    client.force_login(make_user("ann"))
    response = client.get(URL)
    assert response.status_code == 302 and "login" in response["Location"]


def test_staff_without_the_usage_permission_get_403(client, django_user_model):
    clerk = django_user_model.objects.create_user("clerk", password="pw", is_staff=True)
    client.force_login(clerk)
    assert client.get(URL).status_code == 403
    assert client.get(f"{URL}users.csv").status_code == 403
    index = client.get(reverse("admin:index")).content.decode()
    assert "Billing console" not in index


@pytest.mark.parametrize(
    ("maximum", "integer", "step"),
    [
        (0, False, 1.0),
        (2000, True, 500),
        (7, True, 2),
        (0.03, False, 0.01),
        (3, True, 1),
    ],
)
def test_ticks_come_at_nice_steps(maximum, integer, step):
    assert charts.nice_step(maximum, integer=integer) == pytest.approx(step)


def test_long_charts_label_every_kth_bar_and_shorten_long_names():
    chart = charts.bar_chart(
        title="t",
        points=[(f"a-very-long-model-name-{i}", i) for i in range(25)],
        format_value=str,
    )
    assert len(chart.bars) == 25 and len(chart.x_labels) == 9  # every 3rd
    assert chart.x_labels[0].text == "a-very-long-m…"
    assert re.fullmatch(r"\d+\.\d", chart.bars[1].x)

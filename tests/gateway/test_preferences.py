"""A user's gateway preferences (gateway.models.UserPreference): "Reuse cached
answers" is off by default, set by a service, read by selectors, and toggled on the
settings page (POST, CSRF, login required)."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from gateway import selectors, services
from gateway.models import UserPreference

pytestmark = pytest.mark.django_db

CHECKBOX_RE = re.compile(r'<input type="checkbox" name="reuse_cached_answers"[^>]*>')


def checkbox(page: str) -> str:
    """The "Reuse cached answers" checkbox of a settings page."""
    found = CHECKBOX_RE.search(page)
    assert found, "the settings page has no reuse_cached_answers checkbox"
    return found.group(0)


def csrf_client(user) -> tuple[Client, str]:
    """A logged-in client that enforces CSRF, and its token (from the settings page)."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get(reverse("account-settings"))
    return client, client.cookies["csrftoken"].value


def test_reuse_cached_answers_is_off_by_default(user):
    assert selectors.cache_opt_in(user=user) is False
    preference = selectors.user_preference_get(user=user)
    assert preference.reuse_cached_answers is False and preference.pk is None
    assert not UserPreference.objects.exists()  # reading stores nothing


def test_the_preference_is_per_user_and_can_be_turned_off_again(user, other_user):
    services.user_preference_set(user=user, reuse_cached_answers=True)
    assert selectors.cache_opt_in(user=user) is True
    assert selectors.cache_opt_in(user=other_user) is False
    services.user_preference_set(user=user, reuse_cached_answers=True)  # idempotent
    assert UserPreference.objects.filter(user=user).count() == 1
    services.user_preference_set(user=user, reuse_cached_answers=False)
    assert selectors.cache_opt_in(user=user) is False
    assert selectors.user_preference_get(user=user).pk is not None


def test_settings_page_toggles_reuse_cached_answers(user):
    client, token = csrf_client(user)
    page = client.get(reverse("account-settings")).content.decode()
    assert "Reuse cached answers" in page and "checked" not in checkbox(page)
    assert "Regenerate" in page and "per user" in page  # the explanation

    url = reverse("account-preferences")
    turned_on = client.post(
        url, {"reuse_cached_answers": "on", "csrfmiddlewaretoken": token}
    )
    assert turned_on.status_code == 302
    assert turned_on["Location"] == reverse("account-settings")
    assert selectors.cache_opt_in(user=user) is True
    page = client.get(reverse("account-settings")).content.decode()
    assert "checked" in checkbox(page) and "Cached answers are on." in page

    # an unticked checkbox is not sent at all: that turns it off
    client.post(url, {"csrfmiddlewaretoken": token})
    assert selectors.cache_opt_in(user=user) is False
    assert "checked" not in checkbox(
        client.get(reverse("account-settings")).content.decode()
    )


def test_preferences_post_without_csrf_token_is_refused(user):
    client, _token = csrf_client(user)
    response = client.post(
        reverse("account-preferences"), {"reuse_cached_answers": "on"}
    )
    assert response.status_code == 403
    assert selectors.cache_opt_in(user=user) is False


def test_preferences_need_a_signed_in_user_and_a_post(client, user):
    url = reverse("account-preferences")
    response = client.post(url, {"reuse_cached_answers": "on"})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert not UserPreference.objects.exists()
    client.force_login(user)
    assert client.get(url).status_code == 405
    assert selectors.cache_opt_in(user=user) is False

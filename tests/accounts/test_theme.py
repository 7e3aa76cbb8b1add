"""The colour theme stored per user (accounts.models.Appearance): POST /settings/theme/
stores system, light or dark; every page renders it as <html data-theme> so the page
never flashes the other theme; anything else is a 400 that stores nothing."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.models import Appearance

pytestmark = pytest.mark.django_db


def test_a_page_renders_system_until_the_user_chooses(auth_client):
    page = auth_client.get(reverse("account-settings")).content.decode()
    assert '<html lang="en" data-theme="system"' in page


def test_the_toggle_stores_the_theme_and_every_page_renders_it(auth_client, user):
    response = auth_client.post(
        reverse("account-theme"), {"theme": "dark"}, HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 204
    assert Appearance.objects.get(user=user).theme == "dark"
    for name in ("chat-home", "account-settings", "document-list"):
        page = auth_client.get(reverse(name)).content.decode()
        assert 'data-theme="dark"' in page, name
        # the toggle offers the other theme (a form that works without JS)
        assert 'name="theme" value="light" id="theme-toggle"' in page, name


def test_a_form_post_goes_back_to_the_page_it_came_from(auth_client, user):
    response = auth_client.post(
        reverse("account-theme"), {"theme": "light", "next": "/memory/"}
    )
    assert (response.status_code, response["Location"]) == (302, "/memory/")
    assert Appearance.objects.get(user=user).theme == "light"
    elsewhere = auth_client.post(
        reverse("account-theme"), {"theme": "system", "next": "https://evil.example/"}
    )
    assert elsewhere["Location"] == reverse("account-settings")


@pytest.mark.parametrize("theme", ["", "blue", "DARK"])
def test_an_unknown_theme_is_a_400_and_stores_nothing(auth_client, user, theme):
    response = auth_client.post(
        reverse("account-theme"), {"theme": theme}, HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_theme"
    assert not Appearance.objects.filter(user=user).exists()


def test_the_theme_needs_a_post_and_a_signed_in_user(client, auth_client):
    assert auth_client.get(reverse("account-theme")).status_code == 405
    response = client.post(reverse("account-theme"), {"theme": "dark"})
    assert response.status_code in (302, 401, 403)
    assert not Appearance.objects.exists()

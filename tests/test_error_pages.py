"""The site's own pages for a refused method (405) and a failed CSRF check (403)
(chatsite/http.py, chatsite/middleware.py)."""

import httpx
import pytest
from django.test import Client, override_settings
from django.urls import reverse

from conversations.models import Conversation, Message
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in():
    client = Client()
    client.force_login(make_user("visitor"))
    return client


def test_a_get_on_a_post_only_address_is_a_page_that_says_what_to_do(signed_in):
    response = signed_in.get(reverse("logout"))
    assert response.status_code == 405
    assert "POST" in response["Allow"]
    page = response.content.decode()
    assert "Not available this way" in page
    assert "accepts" in page and "POST" in page
    # in the site's layout: the signed-in user is still signed in afterwards
    assert signed_in.get(reverse("chat-home")).status_code == 200


def test_a_json_client_gets_the_405_as_a_json_error(signed_in):
    response = signed_in.get(
        reverse("message-send-new"), HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert "POST" in response.json()["error"]["message"]


@override_settings(DEBUG=True)
def test_a_failed_csrf_check_is_the_sites_403_even_with_debug_on():
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("csrf"))
    response = client.post(reverse("message-send-new"), {"content": "hello"})
    assert response.status_code == 403
    page = response.content.decode()
    assert "expired" in page and "Nothing was saved" in page
    assert "CSRF verification failed" not in page  # Django's debug page
    assert Message.objects.count() == 0 and Conversation.objects.count() == 0


def test_a_json_client_gets_the_csrf_failure_as_a_json_error():
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("csrf-json"))
    response = client.post(
        reverse("message-send-new"),
        {"content": "hello"},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "csrf_failed"
    assert Message.objects.count() == 0


# --- make run: the site's own pages, static files served ------------------------------


@pytest.mark.django_db(transaction=True)
def test_make_run_settings_serve_the_sites_404_and_static_files(settings):
    """The web server under chatsite.settings.dev (what `make run` starts, with none
    of the DJANGO_ variables a developer may set): an unknown address is the site's
    404 page, not Django's debug page listing the URL patterns; static files still
    load; a body over the cap is refused."""
    from tests.stack import stack_env, web_process

    env = {k: v for k, v in stack_env().items() if not k.startswith("DJANGO_")}
    env["DJANGO_SETTINGS_MODULE"] = "chatsite.settings.dev"
    env["REDIS_URL"] = settings.REDIS_URL
    env.pop("TEST_REDIS_URL", None)
    env["REQUEST_MAX_BODY_BYTES"] = "2000"  # small: sent whole before the refusal
    with web_process(env) as web:
        response = httpx.get(web.base + "/no-such-page/")
        assert response.status_code == 404
        assert "This page does not exist" in response.text
        assert "<title>Not found · Chat</title>" in response.text
        assert "Using the URLconf" not in response.text  # Django's debug 404
        assert "conversation-search" not in response.text  # no URL pattern names
        css = httpx.get(web.base + "/static/site.css")
        assert css.status_code == 200
        assert css.headers["content-type"].startswith("text/css")
        # a body over the cap is the site's 413 through the server, by its length
        # or, sent chunked, while it arrives (chatsite/bodycap.py)
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        sized = httpx.post(web.base + "/login/", content=b"x" * 2001, headers=form)
        assert sized.status_code == 413 and "limit of 2,000 bytes" in sized.text
        pieces = (b"x" * 1000 for _ in range(3))
        chunked = httpx.post(web.base + "/login/", content=pieces, headers=form)
        assert chunked.status_code == 413

"""Friendly names on the pages: a model's display name (accounts.templatetags.ui.
model_label) and the settings page's password rules in one sentence."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.forms import password_rules
from accounts.templatetags.ui import model_label


@pytest.mark.parametrize(
    ("model_id", "shown"),
    [
        ("SmolLM2-135M-Instruct.Q4_1", "SmolLM2 135M Instruct"),
        ("HuggingFaceTB/SmolLM2-360M-Instruct-GGUF", "SmolLM2 360M Instruct"),
        ("Qwen2.5-7B-Instruct-Q4_K_M.gguf", "Qwen2.5 7B Instruct"),
        ("Tiny Model 1", "Tiny Model 1"),
        ("", ""),
        (None, ""),
    ],
)
def test_a_model_id_is_shown_prettified(model_id, shown):
    assert model_label(model_id) == shown


def test_a_configured_display_name_wins(settings):
    settings.CHAT_MODEL_DISPLAY_NAMES = {"SmolLM2-135M-Instruct.Q4_1": "Smol (fast)"}
    assert model_label("SmolLM2-135M-Instruct.Q4_1") == "Smol (fast)"


def test_the_password_rules_follow_the_validators(settings):
    settings.AUTH_PASSWORD_VALIDATORS = [
        {
            "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
            "OPTIONS": {"min_length": 12},
        },
        {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
    ]
    assert password_rules() == "At least 12 characters; not only digits."
    settings.AUTH_PASSWORD_VALIDATORS = []
    assert password_rules() == ""


@pytest.mark.django_db
def test_the_settings_page_has_plain_labels(auth_client):
    html = auth_client.get(reverse("account-settings")).content.decode()
    assert ">Username</label>" in html and "Username:" not in html
    assert ">Current password</label>" in html
    assert "At least 8 characters" in html
    assert "<li>Your password can" not in html  # not Django's list of rules

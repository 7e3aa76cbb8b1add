"""The product default of input moderation (chatsite/settings/base.py)."""

from __future__ import annotations

import importlib

import pytest


def test_input_moderation_is_on_by_default_in_the_product(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The test settings keep it off (tests opt in); the product settings must not.
    monkeypatch.delenv("SAFETY_INPUT_ENABLED", raising=False)
    base = importlib.import_module("chatsite.settings.base")
    try:
        assert importlib.reload(base).SAFETY_INPUT_ENABLED is True
    finally:
        importlib.reload(base)  # back to what the process's environment says

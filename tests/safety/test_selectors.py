"""The per-category policies are read once per SAFETY_CONFIG_CACHE_S (safety/selectors.py)."""

from __future__ import annotations

import time

import pytest

from safety import selectors
from safety.categories import Category
from safety.models import CategoryPolicy

pytestmark = pytest.mark.django_db


def test_every_category_is_seeded_blocking_but_prompt_injection_flags():
    config = selectors.safety_config()
    assert set(config.policies) == set(Category)
    actions = {c: p.action for c, p in config.policies.items()}
    assert actions.pop(Category.PROMPT_INJECTION) == "flag"
    assert set(actions.values()) == {"block"}
    assert all(p.threshold is None for p in config.policies.values())


def test_the_policy_snapshot_is_reused_until_its_ttl_expires(settings, monkeypatch):
    monkeypatch.setattr(selectors, "_config", None)
    settings.SAFETY_CONFIG_CACHE_S = 60
    first = selectors.safety_config()
    CategoryPolicy.objects.filter(category="hate").update(action="off", threshold=0.9)
    assert selectors.safety_config() is first  # within the TTL: no query
    assert first.policy(Category.HATE).action == "block"
    later = time.monotonic() + 61
    monkeypatch.setattr(selectors.time, "monotonic", lambda: later)
    reloaded = selectors.safety_config()
    assert reloaded.policy(Category.HATE) == selectors.Policy(0.9, "off")


def test_with_a_zero_ttl_every_read_sees_the_latest_edit(settings):
    settings.SAFETY_CONFIG_CACHE_S = 0
    selectors.safety_config()
    CategoryPolicy.objects.filter(category="fraud").update(action="flag")
    assert selectors.safety_config().policy(Category.FRAUD).action == "flag"


def test_a_category_without_a_row_gets_its_shipped_policy(settings):
    settings.SAFETY_CONFIG_CACHE_S = 0
    CategoryPolicy.objects.all().delete()  # as a flushed (transactional) test db
    config = selectors.safety_config()
    assert config.policy(Category.WEAPONS) == selectors.Policy(None, "block")
    assert config.policy(Category.PROMPT_INJECTION) == selectors.Policy(None, "flag")


def test_the_shipped_policies_are_what_the_migration_seeds():
    from importlib import import_module

    seed = import_module("safety.migrations.0002_seed_category_policies")
    assert seed.DEFAULTS == {
        c.value: p.action for c, p in selectors.SHIPPED_POLICIES.items()
    }

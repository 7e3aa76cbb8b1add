"""Fixtures of the API tests: an API key of ``user`` and the default pool; one
requests-per-minute window for a whole test."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gateway import requestrate, services
from tests.gateway import factories


@pytest.fixture
def api_key(user) -> str:
    factories.pool("default", model="scripted-1")
    return services.api_key_create(user=user, name="tests")[1]


@pytest.fixture
def one_minute(monkeypatch) -> None:
    """Count every API request of the test in one requests-per-minute window (its
    clock stopped 20 s into a minute), so that counts do not restart at a minute's end."""
    monkeypatch.setattr(requestrate, "time", SimpleNamespace(time=lambda: 6_000_020.0))

"""Fixtures of the API tests: an API key of ``user`` and the default pool."""

from __future__ import annotations

import pytest

from gateway import services
from tests.gateway import factories


@pytest.fixture
def api_key(user) -> str:
    factories.pool("default", model="scripted-1")
    return services.api_key_create(user=user, name="tests")[1]

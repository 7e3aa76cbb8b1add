"""Fixtures of the tools tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from asgiref.sync import SyncToAsync
from django.db import connections


def _close() -> None:
    for connection in connections.all(initialized_only=True):
        connection.close()


@pytest.fixture(autouse=True)
def _async_orm_connections_closed() -> Iterator[None]:
    """Close the database connection the async ORM opened on asgiref's single
    thread (an async test has no outer sync thread), so it does not keep the test
    database in use when pytest-django drops it."""
    yield
    SyncToAsync.single_thread_executor.submit(_close).result()

"""Shared by the billing commands: parsing a token limit, turning a domain error into
a CommandError (a message and exit status 1)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.management.base import CommandError

from chatsite.errors import DomainError

NO_LIMIT = ("none", "unlimited")


def token_limit(value: str) -> int | None:
    """An argparse type: a whole number of tokens >= 0, or ``unlimited`` / ``none``
    (None). Underscores and commas as thousands separators are accepted."""
    text = value.strip().lower()
    if text in NO_LIMIT:
        return None
    try:
        number = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a token count: give a whole number >= 0 or 'unlimited'."
        )
    return number


@contextmanager
def domain_errors() -> Iterator[None]:
    """Re-raise a :class:`DomainError` of a service as a CommandError (its message)."""
    try:
        yield
    except DomainError as exc:
        raise CommandError(exc.message) from exc

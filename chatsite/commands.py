"""Helpers shared by the management commands of every app: the audit log's actor of a
command run, a user by name, parsing a token limit, turning a domain error into a
CommandError (a message and exit status 1)."""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from chatsite.errors import DomainError

NO_LIMIT = ("none", "unlimited")


def command_actor() -> str:
    """The audit log's actor label of a command run: the OS user."""
    try:
        return f"command ({getpass.getuser()})"
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "command"


def user_get(username: str) -> Any:
    """The user named ``username``; CommandError if there is none."""
    User = get_user_model()
    try:
        return User.objects.get(**{User.USERNAME_FIELD: username})
    except User.DoesNotExist as exc:
        raise CommandError(f"No user named {username!r}.") from exc


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

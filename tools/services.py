"""Writes: a user's choice of tools."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.db import transaction

from chatsite.errors import InvalidInput
from tools.models import ToolPreference

__all__ = ["tool_choice_set", "tool_enabled_set"]

# Names kept at most in one user's choice (a bound on what a client can store).
MAX_CHOICES = 200


def tool_choice_set(*, user_id: int, disabled: Collection[str]) -> list[str]:
    """Store the tools ``user_id`` turned off (registry names; any not offered now
    is kept, so an MCP tool stays off while its server is down) and return them,
    sorted. Raises :class:`~chatsite.errors.InvalidInput` for more than MAX_CHOICES names or a name over 100
    characters."""
    names = sorted({str(n) for n in disabled})
    if len(names) > MAX_CHOICES:
        raise InvalidInput(f"at most {MAX_CHOICES} tools can be turned off")
    if any(len(n) > 100 or not n for n in names):
        raise InvalidInput("a tool name is empty or longer than 100 characters")
    ToolPreference.objects.update_or_create(
        user_id=user_id, defaults={"disabled": names}
    )
    return names


def tool_enabled_set(*, user_id: int, name: Any, enabled: bool) -> list[str]:
    """Turn the tool ``name`` on or off for ``user_id`` (the composer's Tools menu),
    keeping their other choices; return the names now off, sorted. Raises
    :class:`~chatsite.errors.InvalidInput` as :func:`tool_choice_set` does."""
    if not isinstance(name, str) or not name:
        raise InvalidInput("Name the tool to turn on or off.")
    with transaction.atomic():  # two toggles at once: neither lost
        pref = ToolPreference.objects.select_for_update().filter(user_id=user_id)
        row = pref.first()
        off = set(row.disabled) if row is not None else set()
        if enabled:
            off.discard(name)
        else:
            off.add(name)
        return tool_choice_set(user_id=user_id, disabled=off)

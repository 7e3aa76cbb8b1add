"""Writes: a user's choice of tools."""

from __future__ import annotations

from collections.abc import Collection

from chatsite.errors import InvalidInput
from tools.models import ToolPreference

__all__ = ["tool_choice_set"]

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

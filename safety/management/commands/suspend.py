"""``manage.py suspend USER --until <ISO datetime | 2h | 3d> --reason "..."``: suspend
a user from the command line (audited like the admin's action)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from chatsite.commands import command_actor, user_get
from safety import suspensions

DURATION = re.compile(r"^(\d+)\s*([mhdw])$")
UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def until_parse(value: str, *, now: datetime | None = None) -> datetime:
    """An aware datetime from an ISO 8601 datetime (naive: UTC) or a duration from
    ``now`` ("30m", "2h", "3d", "1w"). Raises CommandError otherwise."""
    now = now or timezone.now()
    match = DURATION.match(value.strip().lower())
    if match:
        return now + timedelta(seconds=int(match[1]) * UNIT_S[match[2]])
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise CommandError(
            f"--until {value!r}: give an ISO datetime (2026-12-31T18:00) or a "
            "duration such as 30m, 2h, 3d or 1w."
        ) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Suspend a user until a time (ISO datetime or a duration such as 2h, 3d)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--until", required=True)
        parser.add_argument("--reason", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        user = user_get(options["username"])
        until = until_parse(options["until"])
        if until <= timezone.now():
            raise CommandError(f"--until {options['until']!r} is in the past.")
        reason = options["reason"].strip()
        if not reason:
            raise CommandError("--reason must not be empty.")
        suspension = suspensions.suspension_create(
            user=user,
            until=until,
            reason=reason,
            actor=None,
            actor_label=command_actor(),
        )
        self.stdout.write(
            f"Suspended {user.get_username()} until "
            f"{suspension.until.astimezone(UTC):%Y-%m-%d %H:%M} UTC."
        )

"""``manage.py reset_quota USER``: give a user their token budget back for the current
minute, day and month (audited). Requests in flight keep their reservations."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chatsite.commands import command_actor, user_get
from gateway.billing import services


class Command(BaseCommand):
    help = (
        "Reset a user's token quota for the current minute, day and month "
        "(requests in flight stay counted until they finish)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, **opts: Any) -> None:
        user = user_get(opts["username"])
        done = services.user_quota_reset(user=user, actor_label=command_actor())
        lines = [
            f"  {r.name:<7} {r.before:>12,} -> {r.after:,} tokens used"
            + (" (requests in flight)" if r.after else "")
            for r in done
        ]
        self.stdout.write(
            f"Reset the quota of {user.get_username()}:\n" + "\n".join(lines)
        )

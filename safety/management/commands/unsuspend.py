"""``manage.py unsuspend USER``: lift a user's suspension (audited)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chatsite.commands import command_actor, user_get
from safety import suspensions


class Command(BaseCommand):
    help = "Lift every suspension of a user that is in force now."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, **options: Any) -> None:
        user = user_get(options["username"])
        lifted = suspensions.suspension_lift(
            user=user, actor=None, actor_label=command_actor()
        )
        if lifted:
            self.stdout.write(f"Lifted {len(lifted)} suspension(s) of {user}.")
        else:
            self.stdout.write(f"{user} is not suspended.")

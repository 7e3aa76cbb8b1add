"""``manage.py assign_plan USER PLAN``: put a user on a plan (audited)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chatsite.commands import command_actor, domain_errors, user_get
from gateway.billing import services


class Command(BaseCommand):
    help = "Put a user on a plan; their next request uses its limits."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("plan", help="the plan's name (see create_plan)")

    def handle(self, *args: Any, **opts: Any) -> None:
        user = user_get(opts["username"])
        with domain_errors():
            subscription, previous = services.subscription_assign(
                user=user, plan_name=opts["plan"], actor_label=command_actor()
            )
        was = previous.name if previous else "the default plan"
        self.stdout.write(
            f"{user.get_username()} is now on plan {subscription.plan.name!r} "
            f"(was {was})."
        )

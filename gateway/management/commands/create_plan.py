"""``manage.py create_plan NAME --tokens-per-month N [--tokens-per-day N]
[--tokens-per-minute N] [--priority P] [--pool NAME ...] [--default]``: create a plan
(audited like the admin's edits)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chatsite.commands import command_actor, domain_errors, token_limit
from gateway.billing import services


def _limit(value: int | None) -> str:
    return "no limit" if value is None else f"{value:,} tokens"


class Command(BaseCommand):
    help = (
        "Create a plan with token limits (a whole number of tokens, or 'unlimited'). "
        "Assign it with assign_plan."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument(
            "--tokens-per-month",
            type=token_limit,
            required=True,
            help="monthly token budget (UTC calendar month), or 'unlimited'",
        )
        parser.add_argument(
            "--tokens-per-day", type=token_limit, help="tokens per UTC day"
        )
        parser.add_argument(
            "--tokens-per-minute",
            "--tpm",
            type=token_limit,
            help="tokens per minute",
        )
        parser.add_argument(
            "--priority",
            type=int,
            default=0,
            help="higher is served first when pools are busy (default 0)",
        )
        parser.add_argument(
            "--pool",
            action="append",
            dest="pools",
            default=[],
            help="a pool the plan may use (repeat; none: every enabled pool)",
        )
        parser.add_argument(
            "--default",
            action="store_true",
            help="make it the plan of users without a subscription",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        with domain_errors():
            plan = services.plan_create(
                name=opts["name"],
                tokens_per_month=opts["tokens_per_month"],
                tokens_per_day=opts["tokens_per_day"],
                tokens_per_minute=opts["tokens_per_minute"],
                priority=opts["priority"],
                pools=opts["pools"],
                is_default=opts["default"],
                actor_label=command_actor(),
            )
        pools = ", ".join(plan.allowed_pools.values_list("name", flat=True))
        self.stdout.write(
            f"Created plan {plan.name!r}: "
            f"per month {_limit(plan.monthly_token_budget)}, "
            f"per day {_limit(plan.tokens_per_day)}, "
            f"per minute {_limit(plan.tokens_per_minute)}, "
            f"priority {plan.priority}, pools: {pools or 'every enabled pool'}"
            f"{', default plan' if plan.is_default else ''}."
        )

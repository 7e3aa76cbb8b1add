"""``manage.py usage_report [--since DATE] [--until DATE] [--by user|model|day]
[--csv]``: usage and cost per group over whole UTC days, as a table or CSV."""

from __future__ import annotations

import csv
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chatsite.commands import domain_errors
from gateway.billing import selectors

COLUMNS = ["requests", "prompt_tokens", "completion_tokens", "total_tokens", "cost"]


class Command(BaseCommand):
    help = (
        "Usage (requests, tokens, cost) per user, model or UTC day between two dates "
        f"(both included; default: the last {selectors.DEFAULT_RANGE_DAYS} days)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", help="first UTC day, YYYY-MM-DD")
        parser.add_argument("--until", help="last UTC day, YYYY-MM-DD (default: today)")
        parser.add_argument("--by", choices=selectors.GROUP_BY_CHOICES, default="user")
        parser.add_argument("--csv", action="store_true", help="write CSV")

    def handle(self, *args: Any, **opts: Any) -> None:
        with domain_errors():
            period = selectors.date_range_parse(
                start=opts["since"], end=opts["until"], max_days=100 * 366
            )
        rows = selectors.usage_by(period=period, by=opts["by"])
        total = selectors.usage_total(period=period)
        table = [
            [row.key, *(getattr(row, c) for c in COLUMNS)] for row in [*rows, total]
        ]
        header = [opts["by"], *COLUMNS]
        if opts["csv"]:
            writer = csv.writer(self.stdout, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(table)
            return
        self.stdout.write(
            f"Usage by {opts['by']}, {period.start:%Y-%m-%d} to {period.end:%Y-%m-%d} "
            "(UTC, both included):"
        )
        if not total.requests:
            self.stdout.write("No usage in this range.")
        text = [header, *[[_cell(v) for v in r] for r in table]]
        widths = [max(len(r[i]) for r in text) for i in range(len(header))]
        for i, line in enumerate(text):
            if i == len(text) - 1:
                self.stdout.write("  ".join("-" * w for w in widths))
            self.stdout.write(
                "  ".join(
                    cell.ljust(w) if j == 0 else cell.rjust(w)
                    for j, (cell, w) in enumerate(zip(line, widths, strict=True))
                )
            )


def _cell(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)

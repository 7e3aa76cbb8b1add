"""`manage.py moderation_budgets --oof FILE [--budgets 0.003,0.005] [--write MODEL
--corpus-budget X]`: compare corpus budgets on the out-of-fold scores a training run
kept (``moderation_train --oof-out FILE``), without training again; with ``--write``,
put the thresholds of ``--corpus-budget`` into that run's model file
(:mod:`safety.classifiers.budgets`).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from safety.categories import Category
from safety.classifiers.budgets import budgets_compare, thresholds_rewrite
from safety.classifiers.training import CORPUS_FP_BUDGET


def _fractions(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise CommandError(f"--budgets: {exc}") from exc


class Command(BaseCommand):
    help = "Compare corpus false-positive budgets on saved out-of-fold scores."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--oof", required=True, help="moderation_train --oof-out")
        parser.add_argument(
            "--budgets",
            default="0.003,0.005,0.0075,0.01",
            help="corpus budgets to compare (fractions, comma-separated)",
        )
        parser.add_argument(
            "--write", default=None, help="model file (.npz) of the same run to update"
        )
        parser.add_argument(
            "--corpus-budget",
            type=float,
            default=CORPUS_FP_BUDGET,
            help="the budget whose thresholds --write puts in the model file",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        budgets = _fractions(opts["budgets"])
        if opts["write"] and opts["corpus_budget"] not in budgets:
            budgets.append(opts["corpus_budget"])
        results = budgets_compare(opts["oof"], budgets)
        names = [c.value for c in Category]
        self.stdout.write("| corpus budget | " + " | ".join(names) + " | thresholds |")
        self.stdout.write("| --- " * (len(names) + 2) + "|")
        for r in results:
            self.stdout.write(
                f"| {r.corpus_budget:.2%} | "
                + " | ".join(f"{v:.2f}" for v in r.recall)
                + f" | {r.thresholds.min():.2f}-{r.thresholds.max():.2f} |"
            )
        pools = list(results[0].flagged)
        self.stdout.write("\nbenign flagged out of fold:")
        self.stdout.write("| corpus budget | " + " | ".join(pools) + " |")
        self.stdout.write("| --- " * (len(pools) + 1) + "|")
        for r in results:
            cells = [
                f"{r.flagged[p][0]}/{r.flagged[p][1]} = "
                f"{r.flagged[p][0] / r.flagged[p][1]:.2%}"
                for p in pools
            ]
            self.stdout.write(f"| {r.corpus_budget:.2%} | " + " | ".join(cells) + " |")
        for r in results:
            self.stdout.write(
                f"thresholds at {r.corpus_budget:.2%}: "
                + " ".join(
                    f"{n}={t:.2f}" for n, t in zip(names, r.thresholds, strict=True)
                )
            )
        if opts["write"]:
            chosen = next(
                r for r in results if r.corpus_budget == opts["corpus_budget"]
            )
            thresholds_rewrite(opts["write"], chosen.thresholds)
            self.stdout.write(
                self.style.SUCCESS(
                    f"wrote the thresholds of {opts['corpus_budget']:.2%} to "
                    f"{opts['write']}"
                )
            )

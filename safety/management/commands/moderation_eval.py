"""`manage.py moderation_eval [--backend B] [--set FILE] [--details]`: measure a
moderation backend on a labelled set (default: the held-out set) and print
per-category precision / recall / F1, false-positive rates and latency p50/p99
(:mod:`safety.evaluation`). Exits non-zero when the backend is unavailable.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from safety.classifiers import BACKENDS, ModerationUnavailable, classifier_get
from safety.dataset import HELDOUT_SET, examples_load
from safety.evaluation import evaluate, report_lines


class Command(BaseCommand):
    help = (
        "Evaluate a moderation backend on a labelled JSONL set (held-out by default)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--backend", choices=BACKENDS, default=None)
        parser.add_argument("--set", default=str(HELDOUT_SET), help="labelled JSONL")
        parser.add_argument(
            "--details", action="store_true", help="list false positives and misses"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            examples = examples_load(opts["set"])
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        classifier = classifier_get(opts["backend"])
        try:
            report = evaluate(classifier, examples)
        except ModerationUnavailable as exc:
            raise CommandError(
                f"{exc.message} (for the embedded backend, start an embedding worker: "
                "`manage.py run_inference_worker --engine sentence-transformers`)"
            ) from exc
        self.stdout.write(f"set: {opts['set']} ({len(examples)} examples)")
        for line in report_lines(report, details=opts["details"]):
            self.stdout.write(line)

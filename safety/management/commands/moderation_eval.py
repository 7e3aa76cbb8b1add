"""`manage.py moderation_eval [--backend B] [--set FILE] [--details]
[--rewritten [SET ...]]`: measure a moderation backend on a labelled set (default: the
held-out set) and print per-category precision / recall / F1, false-positive rates and
latency p50/p99 (:mod:`safety.evaluation`). ``--rewritten`` measures instead the
held-out harmful set rewritten in leetspeak, base64, French, Spanish and Chinese
(all, or the sets named; :mod:`safety.obfuscation_eval`). Exits non-zero when the
backend is unavailable.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from safety.classifiers import BACKENDS, ModerationUnavailable, classifier_get
from safety.dataset import HELDOUT_SET, examples_load
from safety.evaluation import evaluate, report_lines
from safety.obfuscation_eval import SETS, rewritten_lines, rewritten_recall


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
        parser.add_argument(
            "--rewritten",
            nargs="*",
            choices=SETS,
            default=None,
            help="recall on the rewritten held-out sets (all when none is named)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["rewritten"] is not None:
            self._rewritten(opts)
            return
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

    def _rewritten(self, opts: dict[str, Any]) -> None:
        classifier = classifier_get(opts["backend"])
        try:
            scores = rewritten_recall(classifier, opts["rewritten"] or SETS)
        except ModerationUnavailable as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"backend: {classifier.name}")
        for line in rewritten_lines(scores):
            self.stdout.write(line)

"""`manage.py moderation_eval [--backend B] [--set FILE] [--details] [--corpora]
[--rewritten [SET ...]]`: measure a moderation backend on a labelled set (default: the
held-out set) and print per-category precision / recall / F1, false-positive rates and
latency p50/p99 (:mod:`safety.evaluation`). With ``--corpora``, also the false blocks on
each benign evaluation corpus (``safety.dataset.EVAL_CORPORA``: text nobody here wrote)
and the verdicts changed on the perturbation set. ``--rewritten`` measures instead the
held-out harmful set rewritten in leetspeak, base64, French, Spanish and Chinese (all,
or the sets named; :mod:`safety.obfuscation_eval`). Exits non-zero when the backend is
unavailable.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from safety.classifiers import BACKENDS, ModerationUnavailable, classifier_get
from safety.dataset import EVAL_CORPORA, HELDOUT_SET, PERTURBED_SET, examples_load
from safety.evaluation import corpus_score, evaluate, report_lines, verdict_changes
from safety.obfuscation_eval import SETS, rewritten_lines, rewritten_recall

_BATCH = 32


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
        parser.add_argument(
            "--corpora",
            action="store_true",
            help="also the benign evaluation corpora and the perturbation set",
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
        if opts["corpora"]:
            try:
                self._corpora(classifier)
            except ModerationUnavailable as exc:
                raise CommandError(exc.message) from exc

    def _corpora(self, classifier: Any) -> None:
        def judge(texts: list[str]) -> list[Any]:
            # in batches: one embedding request per batch stays within its timeout
            return [
                v
                for i in range(0, len(texts), _BATCH)
                for v in classifier.classify_batch(texts[i : i + _BATCH])
            ]

        for path in EVAL_CORPORA:
            texts = [e.text for e in examples_load(path)]
            score = corpus_score(path.stem, judge(texts))
            worst = ", ".join(f"{c} {n}" for c, n in score.worst) or "-"
            self.stdout.write(
                f"corpus {score.name}: {score.blocked}/{score.texts} blocked = "
                f"{score.rate:.2%} (flagged {score.flagged}; worst: {worst})"
            )
        lines = PERTURBED_SET.read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line]
        changed = verdict_changes(
            judge([r["base"] for r in rows]), judge([r["text"] for r in rows])
        )
        self.stdout.write(
            f"perturbation: {changed}/{len(rows)} verdicts changed = "
            f"{changed / max(len(rows), 1):.2%}"
        )

    def _rewritten(self, opts: dict[str, Any]) -> None:
        classifier = classifier_get(opts["backend"])
        try:
            scores = rewritten_recall(classifier, opts["rewritten"] or SETS)
        except ModerationUnavailable as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"backend: {classifier.name}")
        for line in rewritten_lines(scores):
            self.stdout.write(line)

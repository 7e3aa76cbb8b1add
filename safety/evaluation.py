"""Measuring a moderation backend on a labelled set (``manage.py moderation_eval``).

Per category: precision, recall and F1 of "flagged as this category" against the
labels. On the benign examples: the share flagged as anything (false-positive rate),
also on the ``sensitive`` subset (benign text on sensitive topics) and the ``support``
subset (people in distress asking for help) and the ``everyday`` subset (ordinary
chat); and the share *blocked*, i.e. flagged in a category whose shipped action is
block (prompt injection is flag-only). Latency: each text is classified alone,
as a turn would, so the figure includes the embedding round trip (ms, p50 and p99).
Targets: recall >= 0.9 per category and <= 5 % false positives on benign
(safety/data/README.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from safety.categories import Category
from safety.classifiers.base import Classifier, Verdict
from safety.dataset import TAG_EVERYDAY, TAG_SENSITIVE, TAG_SUPPORT, Example
from safety.models import Action
from safety.selectors import SHIPPED_POLICIES

TARGET_RECALL = 0.9
TARGET_FP_RATE = 0.05


@dataclass
class CategoryScore:
    """Counts and rates of one category; ``support`` = labelled examples."""

    category: Category
    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def support(self) -> int:
        return self.tp + self.fn

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / self.support if self.support else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass
class Report:
    """The outcome of :func:`evaluate`."""

    backend: str
    categories: list[CategoryScore]
    benign: tuple[int, int]  # (flagged, total)
    sensitive: tuple[int, int]
    support: tuple[int, int]
    everyday: tuple[int, int]
    harmful_detected: tuple[int, int]
    latencies_ms: list[float]
    false_positives: list[tuple[Example, Verdict]] = field(default_factory=list)
    misses: list[tuple[Example, Verdict]] = field(default_factory=list)
    # benign / everyday examples flagged in a category whose shipped action blocks
    benign_blocked: tuple[int, int] = (0, 0)
    everyday_blocked: tuple[int, int] = (0, 0)

    def latency_ms(self, q: float) -> float:
        """The ``q``-th percentile (0..100) of per-text latency, ms."""
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else 0.0

    @staticmethod
    def rate(pair: tuple[int, int]) -> float:
        return pair[0] / pair[1] if pair[1] else 0.0

    @property
    def meets_targets(self) -> bool:
        """True when every labelled category's recall and the benign FP rate meet the
        targets."""
        return (
            all(c.recall >= TARGET_RECALL for c in self.categories if c.support)
            and self.rate(self.benign) <= TARGET_FP_RATE
        )


def evaluate(
    classifier: Classifier,
    examples: Sequence[Example],
    *,
    verdicts: Sequence[Verdict] | None = None,
) -> Report:
    """Classify every example one by one (timed) and score the verdicts; with
    ``verdicts`` (one per example, already judged) score those instead, untimed."""
    scores = {c: CategoryScore(c) for c in Category}
    counts = {
        key: [0, 0]
        for key in ("benign", "sensitive", "support", "everyday", "harm")
        + ("benign_blocked", "everyday_blocked")
    }
    blocking = {c for c, p in SHIPPED_POLICIES.items() if p.action == Action.BLOCK}
    latencies: list[float] = []
    report_fp: list[tuple[Example, Verdict]] = []
    report_miss: list[tuple[Example, Verdict]] = []
    for i, example in enumerate(examples):
        if verdicts is not None:
            verdict = verdicts[i]
        else:
            started = time.perf_counter()
            verdict = classifier.classify(example.text)
            latencies.append((time.perf_counter() - started) * 1000)
        flagged = set(verdict.flagged)
        for category in Category:
            if category in example.labels:
                if category in flagged:
                    scores[category].tp += 1
                else:
                    scores[category].fn += 1
            elif category in flagged:
                scores[category].fp += 1
        if example.benign:
            keys = ["benign"]
            keys += ["sensitive"] if TAG_SENSITIVE in example.tags else []
            keys += ["support"] if TAG_SUPPORT in example.tags else []
            keys += ["everyday"] if TAG_EVERYDAY in example.tags else []
            for key in keys:
                counts[key][0] += bool(flagged)
                counts[key][1] += 1
            for key in ("benign", "everyday"):
                if key in keys:
                    counts[f"{key}_blocked"][0] += bool(flagged & blocking)
                    counts[f"{key}_blocked"][1] += 1
            if flagged:
                report_fp.append((example, verdict))
        else:
            counts["harm"][0] += bool(flagged)
            counts["harm"][1] += 1
            if not example.labels & flagged:
                report_miss.append((example, verdict))
    # (hits, total) per group
    pairs = {key: (hits, total) for key, (hits, total) in counts.items()}
    return Report(
        backend=classifier.name,
        categories=list(scores.values()),
        benign=pairs["benign"],
        sensitive=pairs["sensitive"],
        support=pairs["support"],
        everyday=pairs["everyday"],
        harmful_detected=pairs["harm"],
        latencies_ms=latencies,
        false_positives=report_fp,
        misses=report_miss,
        benign_blocked=pairs["benign_blocked"],
        everyday_blocked=pairs["everyday_blocked"],
    )


def report_lines(report: Report, *, details: bool = False) -> list[str]:
    """Render ``report`` as the lines ``moderation_eval`` prints."""

    def mark(ok: bool) -> str:
        return "ok" if ok else "MISS"

    lines = [
        f"backend: {report.backend}",
        f"{'category':18} {'n':>4} {'precision':>9} {'recall':>7} {'f1':>6}  "
        f"recall>={TARGET_RECALL:g}",
    ]
    for c in report.categories:
        if not c.support and not c.fp:
            continue
        target = mark(c.recall >= TARGET_RECALL) if c.support else "-"
        lines.append(
            f"{c.category.value:18} {c.support:4d} {c.precision:9.2f} "
            f"{c.recall:7.2f} {c.f1:6.2f}  {target}"
        )
    labelled = [c for c in report.categories if c.support]
    if labelled:
        lines.append(
            f"{'macro average':18} {sum(c.support for c in labelled):4d} "
            f"{np.mean([c.precision for c in labelled]):9.2f} "
            f"{np.mean([c.recall for c in labelled]):7.2f} "
            f"{np.mean([c.f1 for c in labelled]):6.2f}"
        )
    h = report.harmful_detected
    lines.append(
        f"harmful flagged as any category: {h[0]}/{h[1]} = {report.rate(h):.1%}"
    )
    b = report.benign
    lines.append(
        f"false positives on benign: {b[0]}/{b[1]} = {report.rate(b):.1%}  "
        f"(target <= {TARGET_FP_RATE:.0%}: {mark(report.rate(b) <= TARGET_FP_RATE)})"
    )
    for name, pair in (
        ("sensitive but allowed", report.sensitive),
        ("support-seeking", report.support),
        ("everyday chat", report.everyday),
    ):
        lines.append(
            f"  of which {name}: {pair[0]}/{pair[1]} = {report.rate(pair):.1%}"
        )
    for name, pair in (
        ("benign", report.benign_blocked),
        ("everyday chat", report.everyday_blocked),
    ):
        if pair[1]:
            lines.append(
                f"blocked (a category whose shipped action is block) on {name}: "
                f"{pair[0]}/{pair[1]} = {report.rate(pair):.1%}"
            )
    lines.append(
        f"latency per text (incl. embedding round trip): p50 {report.latency_ms(50):.1f} ms, "
        f"p99 {report.latency_ms(99):.1f} ms over {len(report.latencies_ms)} texts"
    )
    lines.append(f"targets met: {'yes' if report.meets_targets else 'no'}")
    if details:
        for title, rows in (
            ("false positives", report.false_positives),
            ("missed", report.misses),
        ):
            lines.append(f"{title}:")
            for example, verdict in rows:
                labels = ",".join(sorted(c.value for c in example.labels)) or "benign"
                got = ",".join(c.value for c in verdict.flagged) or "-"
                lines.append(f"  [{labels} -> {got}] {example.text}")
    return lines


def blocking_categories() -> set[Category]:
    """The categories whose shipped action is block (prompt injection only flags)."""
    return {c for c, p in SHIPPED_POLICIES.items() if p.action == Action.BLOCK}


@dataclass
class CorpusScore:
    """False blocks on one benign corpus: ``blocked`` texts flagged in a blocking
    category, ``flagged`` in any; ``worst``: (category, blocks), most first."""

    name: str
    texts: int
    blocked: int
    flagged: int
    worst: list[tuple[str, int]]

    @property
    def rate(self) -> float:
        return self.blocked / self.texts if self.texts else 0.0


def corpus_score(name: str, verdicts: Sequence[Verdict]) -> CorpusScore:
    """Score the verdicts on a benign corpus (every flag is a false one)."""
    blocking = blocking_categories()
    counts: dict[str, int] = {}
    blocked = 0
    for verdict in verdicts:
        hit = [c for c in verdict.flagged if c in blocking]
        blocked += bool(hit)
        for c in hit[:1]:
            counts[c.value] = counts.get(c.value, 0) + 1
    worst = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    flagged = sum(v.is_flagged for v in verdicts)
    return CorpusScore(name, len(verdicts), blocked, flagged, worst)


def verdict_changes(base: Sequence[Verdict], perturbed: Sequence[Verdict]) -> int:
    """How many pairs differ in their flagged categories (the verdict a text gets
    must not change because an id, hash, URL, path or snippet was added)."""
    return sum(
        set(a.flagged) != set(b.flagged) for a, b in zip(base, perturbed, strict=True)
    )

"""Issue 24's goal table for input moderation, on text nobody here wrote.

    .venv/bin/python bench/moderation_goals.py [--limit N] [--cache FILE.npz]

``--limit N`` judges the first N texts of each benign set and of the perturbation set
(``make bench`` uses 200: a smoke test; the held-out set is always judged whole).
``--cache FILE.npz`` keeps the vectors (arrays ``texts``, ``vecs``) between runs:
embedding ~15,000 texts on a shared 2-core machine takes most of an hour.

For each benign evaluation corpus (``safety.dataset.EVAL_CORPORA``, built by
``scripts/moderation_corpora.py`` from Debian's packaged documentation) and the
everyday held-out set: texts, false blocks (flagged in a category whose shipped action
is block), rate and the categories that blocked most. Then the perturbation set
(``safety/data/corpora/perturbed.jsonl``): how many verdicts (flagged categories)
change when an id, hash, UUID, order number, URL, path or snippet is added; the
harmful recall per category on ``moderation_heldout.jsonl``; and the time input
moderation adds to a turn (the classifier with the turn's shared vector, ms per
message, p50 and p99: :func:`safety.services` reads the vector the turn already has;
a text with an id is embedded once more without it, which the time leaves out: one
short text through the embedding pool, measured apart in safety/data/README.md).

Texts are embedded in-process with the bundled all-MiniLM-L6-v2 (the engine an
embedding worker runs; no services needed) and judged by
:class:`safety.classifiers.embedded.EmbeddedClassifier` with the shipped thresholds.
Goals: false blocks <= 0.5 % on >= 5,000 texts, verdict changes <= 0.5 %, recall
>= 0.90 in every category, p50 <= 15 ms.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start, option_parser  # noqa: E402
from bench.record import bench_record, pct  # noqa: E402

BATCH = 256
# Where each missed goal's reason is written (issue 24: "the gap and the reason").
GAPS = (
    "goals missed and why: safety/data/README.md, 'Evaluated once: the fifth sets' "
    "(Gaps and reasons)"
)


def main() -> None:
    parser = option_parser(limit=0, cache="")
    args = parser.parse_args()
    django_start({"LOG_LEVEL": "WARNING"})

    import numpy as np

    from inference.engines.sbert import SentenceTransformersEngine
    from safety.classifiers.embedded import EmbeddedClassifier
    from safety.classifiers.features import ids_removed
    from safety.dataset import (
        EVAL_CORPORA,
        EVERYDAY_HELDOUT_SET,
        HELDOUT_SET,
        PERTURBED_SET,
        examples_load,
    )
    from safety.evaluation import corpus_score, evaluate, verdict_changes

    engine = SentenceTransformersEngine()
    asyncio.run(engine.start())
    cache: dict[str, list[float]] = {}
    if args.cache and Path(args.cache).exists():
        with np.load(args.cache) as saved:
            cache = dict(
                zip(saved["texts"].tolist(), saved["vecs"].tolist(), strict=True)
            )

    def embed(texts: list[str]) -> list:
        missing = list(dict.fromkeys(t for t in texts if t not in cache))
        for i in range(0, len(missing), BATCH):
            [result] = asyncio.run(engine.embed([missing[i : i + BATCH]]))
            cache.update(zip(missing[i : i + BATCH], result.vectors, strict=True))
        return [cache[t] for t in texts]

    class InProcess(EmbeddedClassifier):
        # the embedding pool's engine, in this process (no worker needed)
        def vectors_embed(self, texts: Sequence[str]) -> list[list[float]]:
            return embed(list(texts))

    classifier = InProcess()
    times: list[float] = []

    def judge(texts: list[str], *, limit: int | None = None) -> list:
        limit = args.limit if limit is None else limit
        texts = texts[:limit] if limit else texts
        reads = [ids_removed(t) for t in texts]
        embed(reads)  # in batches; a text without ids is its own read
        out = []
        for text, read in zip(texts, reads, strict=True):
            # the turn's vector is the text's; the classifier embeds the read of a
            # text with ids (here from the batch above, so that time is not counted)
            vector = cache[text] if read == text else None
            started = time.perf_counter()
            out.append(classifier.classify(text, vector=vector))
            times.append((time.perf_counter() - started) * 1000)
        return out

    print(f"{'benign corpus':34s} {'texts':>6s} {'blocks':>6s} {'rate':>7s}  worst")
    total = blocks = 0
    for path in (*EVAL_CORPORA, EVERYDAY_HELDOUT_SET):
        score = corpus_score(path.stem, judge([e.text for e in examples_load(path)]))
        worst = ", ".join(f"{c} {n}" for c, n in score.worst) or "-"
        print(
            f"{score.name:34s} {score.texts:6d} {score.blocked:6d} "
            f"{score.rate:7.2%}  {worst}"
        )
        total += score.texts
        blocks += score.blocked
        bench_record(
            bench="moderation_goals",
            metric=f"false blocks {score.name}",
            value=round(100 * score.rate, 2),
            unit="%",
            params=f"{score.texts} texts, worst: {worst}",
            goal="<= 0.5 %",
        )
    rate = blocks / total if total else 0.0
    print(f"{'all benign':34s} {total:6d} {blocks:6d} {rate:7.2%}  (goal <= 0.5 %)")
    bench_record(
        bench="moderation_goals",
        metric="false blocks, all benign corpora",
        value=round(100 * rate, 2),
        unit="%",
        params=f"{total} texts",
        goal="<= 0.5 % on >= 5,000",
    )

    rows = examples_load(PERTURBED_SET)
    bases = [
        json.loads(line)["base"]
        for line in PERTURBED_SET.read_text(encoding="utf-8").splitlines()
        if line
    ]
    perturbed = judge([e.text for e in rows])
    changed = verdict_changes(judge(bases[: len(perturbed)]), perturbed)
    change = changed / len(perturbed) if perturbed else 0.0
    print(
        f"\nverdict changed by added id/hash/UUID/URL/path/snippet: "
        f"{changed}/{len(perturbed)} = {change:.2%} (goal <= 0.5 %)"
    )
    bench_record(
        bench="moderation_goals",
        metric="verdict changed by perturbation",
        value=round(100 * change, 2),
        unit="%",
        params=f"{len(perturbed)} pairs",
        goal="<= 0.5 %",
    )

    heldout = examples_load(HELDOUT_SET)
    report = evaluate(
        classifier, heldout, verdicts=judge([e.text for e in heldout], limit=0)
    )
    print(f"\n{'held-out category':20s} {'n':>4s} {'recall':>7s}  (goal >= 0.90)")
    for c in report.categories:
        if c.support:
            met = "met" if c.recall >= 0.9 else "missed"
            print(f"{c.category.value:20s} {c.support:4d} {c.recall:7.2f}  {met}")
            bench_record(
                bench="moderation_goals",
                metric=f"recall {c.category.value}",
                value=round(c.recall, 3),
                params=f"held-out, {c.support} examples",
                goal=">= 0.90",
            )
    print(GAPS)
    p50, p99 = pct(times, 50), pct(times, 99)
    print(
        f"\ninput moderation per message (shared vector): p50 {p50:.1f} ms, "
        f"p99 {p99:.1f} ms over {len(times)} texts (goal p50 <= 15 ms)"
    )
    if args.cache:
        texts_cached = list(cache)
        np.savez(
            args.cache,
            texts=np.array(texts_cached),
            vecs=np.asarray([cache[t] for t in texts_cached], dtype=np.float32),
        )
    bench_record(
        bench="moderation_goals",
        metric="input moderation per message p50",
        value=round(p50, 2),
        unit="ms",
        params=f"classifier with the turn's vector, {len(times)} texts, p99 {p99:.1f}",
        goal="<= 15 ms",
    )


if __name__ == "__main__":
    main()

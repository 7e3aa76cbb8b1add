"""False cuts of ordinary answers: the embedded model's answers through output moderation.

    .venv/bin/python bench/output_false_cuts.py [--answers PATH] [--limit N] [--chunk 8]
        [--ordinary] [--seen PATH]

Reads ``safety/data/answers_smollm2.jsonl`` (SmolLM2's answers to training-side
prompts, written by ``scripts/smollm2_answers.py``; every answer is benign, so every
cut is a false one) and streams each answer through
:class:`safety.output.OutputModerator` in ``hold`` mode, ``--chunk`` characters per
delta, with the serving settings (windows, first window, backend, category policies,
decision records in Redis): the code path of a live answer. Only the transport of
the vectors differs: the texts the moderator will classify are embedded in-process in
batches with the bundled all-MiniLM-L6-v2 (the engine an embedding worker runs), and
``embed_texts`` is answered from them. Needs the dev Redis and database.

Prints answers cut and flagged, the rate (goal <= 0.5 % on >= 1,000 answers), the
categories, and each cut window with its score. ``--ordinary`` adds the 32 answers
written for ``bench/moderation.py`` (``bench.corpus.ORDINARY_ANSWERS``). ``--seen``
names a file of answers that were looked at before (their cuts read, e.g. an earlier
version of the answers file): the rate is then also printed for the answers not in it,
the figure nothing was tuned on.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.record import bench_record  # noqa: E402

ANSWERS = ROOT / "safety" / "data" / "answers_smollm2.jsonl"
BATCH = 256


def _classified_texts(answer: str, *, max_chars: int, first_chars: int) -> list[str]:
    """The texts the moderator classifies for ``answer``: each window with the one
    before it (:meth:`safety.output.OutputModerator._decide`)."""
    from safety.output import window_split

    windows = window_split(
        answer, max_chars=max_chars, final=True, first_chars=first_chars
    )
    out, previous = [], ""
    for window in windows:
        if window.strip():
            out.append((previous + window).strip())
        previous = window
    return out


def main() -> None:
    parser = option_parser(
        answers=str(ANSWERS), limit=0, chunk=8, ordinary=False, seen=""
    )
    args = parser.parse_args()
    django_start({"LOG_LEVEL": "WARNING"})
    from django.conf import settings
    from django.test import override_settings

    import safety.classifiers.embedded as embedded
    from inference.engines.sbert import SentenceTransformersEngine
    from safety.output import OutputModerator

    rows = [
        json.loads(line)
        for line in Path(args.answers).read_text(encoding="utf-8").splitlines()
        if line
    ]
    rows.sort(key=lambda r: r["id"])
    if args.limit:
        rows = rows[: args.limit]
    if args.ordinary:  # the answers written for bench/moderation.py too
        from bench.corpus import ORDINARY_ANSWERS

        rows += [
            {"id": f"written-{i}", "answer": text}
            for i, text in enumerate(ORDINARY_ANSWERS)
        ]

    engine = SentenceTransformersEngine()
    asyncio.run(engine.start())
    cache: dict[str, list[float]] = {}

    def vectors(texts: list[str]) -> None:
        missing = list(dict.fromkeys(t for t in texts if t not in cache))
        for i in range(0, len(missing), BATCH):
            [result] = asyncio.run(engine.embed([missing[i : i + BATCH]]))
            cache.update(zip(missing[i : i + BATCH], result.vectors, strict=True))

    def embed_texts(texts: list[str], **_: Any) -> SimpleNamespace:
        vectors(texts)
        return SimpleNamespace(vectors=[cache[t] for t in texts])

    max_chars = settings.SAFETY_OUTPUT_WINDOW_CHARS
    first_chars = settings.SAFETY_OUTPUT_FIRST_WINDOW_CHARS
    vectors(
        [
            t
            for r in rows
            for t in _classified_texts(
                r["answer"], max_chars=max_chars, first_chars=first_chars
            )
        ]
    )
    embedded.embed_texts = embed_texts  # the vectors come from this process

    cuts: list[tuple[dict, Any]] = []
    flagged = 0
    categories: Counter[str] = Counter()
    with override_settings(SAFETY_OUTPUT_ENABLED=True, SAFETY_OUTPUT_MODE="hold"):
        for row in rows:
            moderator = OutputModerator(job_id=f"bench-{uuid.uuid4().hex}", user_id=0)
            answer, shown, step = row["answer"], "", None
            for i in range(0, len(answer), args.chunk):
                step = moderator.feed(answer[i : i + args.chunk])
                shown += step.text
                if step.cut:
                    break
            if step is None or not step.cut:
                step = moderator.finish()
                shown += step.text
            if step.cut and moderator.cut_by is not None:
                cuts.append((row, moderator.cut_by, len(shown)))
                categories[moderator.cut_by.category] += 1
            elif any(d.action == "flag" for d in moderator.decisions):
                flagged += 1

    total = len(rows)
    rate = len(cuts) / total if total else 0.0
    print(
        f"false cuts: {len(cuts)}/{total} answers of SmolLM2 = {rate:.2%} "
        f"(goal <= 0.5 %), {flagged} flagged; hold, window <= {max_chars} chars, "
        f"first window <= {first_chars}"
    )
    if args.seen:
        seen = {
            json.loads(line)["id"]
            for line in Path(args.seen).read_text(encoding="utf-8").splitlines()
            if line
        }
        fresh = [r for r in rows if r["id"] not in seen]
        fresh_cuts = [c for c in cuts if c[0]["id"] not in seen]
        fresh_rate = len(fresh_cuts) / len(fresh) if fresh else 0.0
        print(
            f"  of which not in {args.seen}: {len(fresh_cuts)}/{len(fresh)} = "
            f"{fresh_rate:.2%}"
        )
    print("categories:", ", ".join(f"{c} {n}" for c, n in categories.most_common()))
    for row, decision, shown_chars in cuts:
        print(
            f"  #{row['id']} {decision.category} {decision.score:.2f} "
            f"after {shown_chars} chars: {row['answer'][:160]!r}"
        )
    bench_record(
        bench="moderation",
        metric="false cuts of SmolLM2 answers",
        value=round(100 * rate, 2),
        unit="%",
        params=f"{total} answers, hold, first window {first_chars} chars",
        goal="<= 0.5 % on >= 1,000",
    )


if __name__ == "__main__":
    main()

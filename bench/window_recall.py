"""What the window of the last user turns catches, and what it blocks by mistake, by
how its vector is had: the window text embedded (one more text in the turn's
embedding request) or the turns' own vectors averaged (:func:`safety.windows.window_vector`,
no embedding).

    .venv/bin/python bench/window_recall.py [--side train|eval] [--limit N]

Split requests: every harmful example of the set, its words cut into three messages
as even as can be (examples under three words are left out). A split request counts
as caught at the third turn when the window of the three flags a category whose
shipped action is block; "caught at any turn" also counts each message alone and the
window of the first two. Benign windows: three consecutive texts of the benign
corpora joined, as three turns of one conversation; a false block is a window flagged
in a blocking category whose messages alone were not.

``--side train`` (the default) reads the training set and the training-side corpora:
what the choice between the modes may be judged on. ``--side eval`` reads the
held-out set and the evaluation corpora: run once, for the figures of a claim
(safety/data/README.md). Embeds in-process with the bundled all-MiniLM-L6-v2 (the
engine an embedding worker runs); judges with the embedded classifier alone (no
decoded views, no multilingual model), its shipped thresholds.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start, option_parser  # noqa: E402
from bench.record import bench_record  # noqa: E402

BATCH = 256
PARTS = 3
# Top scores of the mean's verdict from which a cascade embeds the window text.
LEVELS = (0.05, 0.1, 0.2, 0.3)


def split(text: str, parts: int = PARTS) -> list[str] | None:
    """``text``'s words in ``parts`` runs as even as can be; None under ``parts``
    words."""
    words = text.split()
    if len(words) < parts:
        return None
    size, extra = divmod(len(words), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        out.append(" ".join(words[start:end]))
        start = end
    return out


def main() -> None:
    parser = option_parser(side="train", limit=0)
    args = parser.parse_args()
    django_start({"LOG_LEVEL": "WARNING"})

    import numpy as np

    from inference.engines.sbert import SentenceTransformersEngine
    from safety.classifiers.embedded import EmbeddedClassifier
    from safety.dataset import (
        EVAL_CORPORA,
        HELDOUT_SET,
        TRAIN_CORPORA,
        TRAIN_SET,
        examples_load,
    )
    from safety.evaluation import blocking_categories
    from safety.windows import window_join, window_vector

    engine = SentenceTransformersEngine()
    asyncio.run(engine.start())
    classifier = EmbeddedClassifier()
    blocking = blocking_categories()
    vectors: dict[str, list[float]] = {}

    def embed(texts: list[str]) -> None:
        todo = list(dict.fromkeys(t for t in texts if t not in vectors))
        for i in range(0, len(todo), BATCH):
            [result] = asyncio.run(engine.embed([todo[i : i + BATCH]]))
            vectors.update(zip(todo[i : i + BATCH], result.vectors, strict=True))

    def blocks(text: str, vector: list[float] | np.ndarray) -> bool:
        verdict = classifier.classify(text, vector=list(vector))
        return any(c in blocking for c in verdict.flagged)

    def window_blocks(parts: list[str]) -> dict[str, bool]:
        """Per mode, whether the window blocks; a cascade escalates to the embedded
        window text when the mean's top score is at least its level."""
        text = window_join(parts)
        mean = window_vector([vectors[p] for p in parts])
        embedded = blocks(text, vectors[text])
        cheap = classifier.classify(text, vector=mean)
        top = max(cheap.scores.values())
        out = {"embed": embedded, "mean": any(c in blocking for c in cheap.flagged)}
        for level in LEVELS:
            out[f"cascade {level}"] = embedded if top >= level else out["mean"]
            escalated[level] = escalated.get(level, 0) + (top >= level)
        return out

    def limited(items: list) -> list:
        return items[: args.limit] if args.limit else items

    harmful_set, benign_sets = (
        (TRAIN_SET, TRAIN_CORPORA)
        if args.side == "train"
        else (HELDOUT_SET, EVAL_CORPORA)
    )
    splits = limited(
        [
            s
            for e in examples_load(harmful_set)
            if not e.benign and (s := split(e.text)) is not None
        ]
    )
    benign_texts = [
        e.text for path in benign_sets for e in examples_load(path) if e.benign
    ]
    triples = limited(
        [benign_texts[i : i + PARTS] for i in range(0, len(benign_texts) - 2, PARTS)]
    )
    embed(
        [p for s in [*splits, *triples] for p in s]
        + [window_join(s) for s in [*splits, *triples]]
        + [window_join(s[:2]) for s in splits]
    )

    escalated: dict[float, int] = {}
    modes = {"embed": "window text embedded", "mean": "mean of turns"}
    modes.update((f"cascade {x}", f"mean, embedded from top score {x}") for x in LEVELS)
    caught = dict.fromkeys(modes, 0)
    anywhere = dict.fromkeys(modes, 0)
    alone = 0
    for parts in splits:
        single = any(blocks(p, vectors[p]) for p in parts)
        alone += single
        last, first_two = window_blocks(parts), window_blocks(parts[:2])
        for mode in caught:
            caught[mode] += last[mode]
            anywhere[mode] += single or last[mode] or first_two[mode]
    harmful_escalated = dict(escalated)
    escalated.clear()
    false = dict.fromkeys(modes, 0)
    for parts in triples:
        if any(blocks(p, vectors[p]) for p in parts):
            continue  # a message alone blocked: not the window's doing
        for mode, hit in window_blocks(parts).items():
            false[mode] += hit

    n, m = len(splits), len(triples)
    print(f"side {args.side}: {n} split requests, {m} benign three-turn windows")
    print(
        f"harmful windows (turns 2 and 3) embedded by the cascades: {harmful_escalated}"
    )
    print()
    print("| window vector | caught by the window (turn 3) | caught at any turn |")
    print("|---|---|---|")
    print(f"| (no window: each message alone) | - | {alone}/{n} = {alone / n:.3f} |")
    for mode, label in modes.items():
        print(
            f"| {label} | {caught[mode]}/{n} = {caught[mode] / n:.3f} | "
            f"{anywhere[mode]}/{n} = {anywhere[mode] / n:.3f} |"
        )
        bench_record(
            bench="window_recall",
            metric=f"split-request recall, {label} ({args.side})",
            value=round(anywhere[mode] / n, 3),
            params=f"{n} harmful examples split over 3 messages",
        )
    print()
    print(
        "| window vector | benign windows blocked (messages alone passed) "
        "| benign windows embedded |"
    )
    print("|---|---|---|")
    for mode, label in modes.items():
        level = float(mode.split()[1]) if mode.startswith("cascade") else None
        share = (
            "0"
            if mode == "mean"
            else f"{escalated.get(level, 0)}/{m}"
            if level is not None
            else "all"
        )
        print(f"| {label} | {false[mode]}/{m} = {false[mode] / m:.2%} | {share} |")
        bench_record(
            bench="window_recall",
            metric=f"benign windows blocked, {label} ({args.side})",
            value=round(100 * false[mode] / m, 2),
            unit="%",
            params=f"{m} three-turn windows of benign corpora",
        )


if __name__ == "__main__":
    main()

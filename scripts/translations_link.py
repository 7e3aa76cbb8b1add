"""Link each retired translation to its English original (``of``) and language (``lang``).

    .venv/bin/python scripts/translations_link.py [--check-only] [--vectors-cache F]

``safety/data/moderation_train_translated.jsonl`` holds the FR/ES/ZH translations of
two retired held-out sets, whose English texts are now blocks of
``moderation_train.jsonl``. The translations were chosen by one rule
(``safety/data/README.md``, "Obfuscation and other languages"): the first 10 harmful
examples of each category, the first 10 ``everyday`` and the first 10 ``sensitive``
non-``support`` benign ones of the held-out file; each language's file held those 120
in the same order, and the retired files were appended FR, ES, ZH. ``BLOCKS`` gives,
per retired set, its English lines and its translated rows, and the order its
translations were written in (the older set: the harmful ones first, then everyday,
then sensitive; the newer one: file order).

The rule is checked twice before anything is written: every pair must carry the same
labels and tags, and (``MIN_IN_BLOCK``) nearly every translation must be nearest by
multilingual-e5-small to its own original among its set's 120 originals; how often
the original is also the nearest of all same-label training texts is printed.
``--check-only`` prints the checks and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LANGS = ("fr", "es", "zh")
PER_LANG = 120
PER_CATEGORY = 10
# (first English line, last English line (1-based, inclusive), first translated row
# (0-based), order): the held-out set retired in 8e8155d and the one in e5eb1a8.
# Written only when every pair's labels and tags agree and at least this share of
# translations is nearest (e5) to its own original among its set's 120 originals
# (an alignment shifted by one row gives none).
MIN_IN_BLOCK = 0.95
BLOCKS = (
    (3526, 3875, 0, "harmful_first"),
    (4275, 4624, 360, "file"),
)


def chosen(rows: list[dict], order: str) -> list[int]:
    """Indexes into ``rows`` (one held-out set, file order) of the examples the rule
    translates, in the order their translations were written."""
    counts: dict[str, int] = {}
    harmful: list[int] = []
    everyday: list[int] = []
    sensitive: list[int] = []
    in_file: list[int] = []
    for i, row in enumerate(rows):
        labels, tags = row.get("labels", []), row.get("tags", [])
        if labels:
            if any(counts.get(c, 0) < PER_CATEGORY for c in labels):
                for c in labels:
                    counts[c] = counts.get(c, 0) + 1
                harmful.append(i)
                in_file.append(i)
        elif "everyday" in tags:
            if len(everyday) < PER_CATEGORY:
                everyday.append(i)
                in_file.append(i)
        elif "sensitive" in tags and "support" not in tags:
            if len(sensitive) < PER_CATEGORY:
                sensitive.append(i)
                in_file.append(i)
    return harmful + everyday + sensitive if order == "harmful_first" else in_file


def key(row: dict) -> tuple:
    return tuple(sorted(row.get("labels", []))), tuple(sorted(row.get("tags", [])))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check-only", action="store_true")
    parser.add_argument("--vectors-cache", default=None, help="e5 vectors by text")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")
    import django

    django.setup()
    from safety.classifiers.multilingual import e5_embed
    from safety.classifiers.vector_cache import vectors_cached
    from safety.dataset import TRAIN_SET, TRAIN_TRANSLATED_SET

    english = [json.loads(line) for line in open(TRAIN_SET, encoding="utf-8")]
    translated = [
        json.loads(line) for line in open(TRAIN_TRANSLATED_SET, encoding="utf-8")
    ]
    original = [-1] * len(translated)
    picked = []
    for first, last, at, order in BLOCKS:
        picks = [first - 1 + i for i in chosen(english[first - 1 : last], order)]
        picked.append(picks)
        if len(picks) != PER_LANG:
            raise SystemExit(f"lines {first}-{last}: {len(picks)} chosen, not 120")
        for k in range(len(LANGS)):
            for j, i in enumerate(picks):
                original[at + k * PER_LANG + j] = i
    if -1 in original:
        raise SystemExit("some translated rows have no block")
    mismatched = [
        t for t, i in enumerate(original) if key(translated[t]) != key(english[i])
    ]
    print(f"labels and tags differ for {len(mismatched)}/{len(translated)} pairs")

    texts = [r["text"] for r in english] + [r["text"] for r in translated]
    vecs = vectors_cached(texts, e5_embed, path=args.vectors_cache)
    ev, tv = vecs[: len(english)], vecs[len(english) :]
    keys = [key(r) for r in english]
    ranks, in_block = [], 0
    for t, row in enumerate(translated):
        same = np.array([k == key(row) for k in keys])
        sims = np.where(same, ev @ tv[t], -2.0)
        ranks.append(int((sims > sims[original[t]]).sum()) + 1)
        picks = picked[0 if t < BLOCKS[1][2] else 1]
        in_block += picks[int((ev[picks] @ tv[t]).argmax())] == original[t]
    rank = np.array(ranks)
    print(
        f"the original is the nearest same-label English training text for "
        f"{(rank == 1).sum()}/{len(rank)}, among the 3 nearest for "
        f"{(rank <= 3).sum()}, the 10 nearest for {(rank <= 10).sum()} (the "
        f"training set holds near-paraphrases); the nearest of its set's 120 "
        f"originals for {in_block}/{len(rank)}"
    )
    wrong = in_block < MIN_IN_BLOCK * len(rank)
    if mismatched or wrong or args.check_only:
        raise SystemExit(0 if args.check_only else 1)
    with open(TRAIN_TRANSLATED_SET, "w", encoding="utf-8") as f:
        for t, row in enumerate(translated):
            row["lang"] = LANGS[(t % (len(LANGS) * PER_LANG)) // PER_LANG]
            row["of"] = english[original[t]]["text"]
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {TRAIN_TRANSLATED_SET}")


if __name__ == "__main__":
    main()

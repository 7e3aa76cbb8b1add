"""The labelled moderation examples kept in the repo (``safety/data/*.jsonl``).

One JSON object a line: ``text`` (what a user typed), ``labels`` (our category values,
:class:`safety.categories.Category`; empty for benign text) and optional ``tags``:
``sensitive`` marks benign text on a sensitive topic that must pass (history, medicine,
security teaching, fiction, "kill a process"), ``support`` a person in distress asking
for help (allowed, see ``safety/data/README.md``), ``everyday`` ordinary chat (greetings,
one-word replies, "remember that I drive a bus", assistant requests). ``moderation_train.jsonl`` trains the
embedded classifier; ``moderation_heldout.jsonl`` (written before the model was trained and
never trained or tuned on; see ``safety/data/README.md``) is only ever evaluated.
``moderation_train_translated.jsonl`` holds only retired held-out translations, for
the multilingual model's training side; each row also names its language (``lang``,
``fr``/``es``/``zh``) and the English training text it translates (``of``), so that
cross-validation keeps a translation in its original's fold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from safety.categories import Category

DATA_DIR = Path(__file__).resolve().parent / "data"
TRAIN_SET = DATA_DIR / "moderation_train.jsonl"
HELDOUT_SET = DATA_DIR / "moderation_heldout.jsonl"
EVERYDAY_HELDOUT_SET = DATA_DIR / "moderation_everyday_heldout.jsonl"
# Held-out translations (evaluation only) and retired ones (training side only).
HELDOUT_TRANSLATED_SETS = tuple(
    DATA_DIR / f"moderation_heldout_{lang}.jsonl" for lang in ("fr", "es", "zh")
)
TRAIN_TRANSLATED_SET = DATA_DIR / "moderation_train_translated.jsonl"
# Everyday messages in other languages (zh, fr, es, de, ja, pt, ru, ko), written for
# the multilingual model's training side only: short ordinary requests in Chinese and
# French were refused in a newcomer's trial.
TRAIN_MULTILINGUAL_SET = DATA_DIR / "moderation_train_multilingual.jsonl"

CORPORA_DIR = DATA_DIR / "corpora"
# Benign text nobody here wrote (scripts/moderation_corpora.py; safety/data/README.md):
# the training side is read by moderation_train as hard negatives, the evaluation side
# only by moderation_eval and bench/moderation_goals.py.
TRAIN_CORPORA = tuple(
    CORPORA_DIR / f"train_{n}.jsonl"
    for n in (
        "manpages",
        "python_library",
        "fortunes",
        "debian_faq",
        "python_tutorial",
        "python_faq",
        "fortunes_late",
        "debian_reference",
        "developers_reference",
        "git_doc",
        "maint_guide",
        "debian_handbook",
    )
)
EVAL_CORPORA = tuple(
    CORPORA_DIR / f"eval_{n}.jsonl"
    for n in (
        "perl_faq",
        "postgresql_doc",
        "sqlite_doc",
        "bash_reference",
        "gnu_standards",
    )
)
PERTURBED_SET = CORPORA_DIR / "perturbed.jsonl"

TAG_SENSITIVE = "sensitive"
TAG_SUPPORT = "support"
TAG_EVERYDAY = "everyday"
TAG_CORPUS = "corpus"


@dataclass(frozen=True)
class Example:
    """One labelled text; ``labels`` empty means benign (must not be flagged).
    ``of``: for a translation, the English text it translates (empty otherwise);
    ``lang``: its language code (empty for English)."""

    text: str
    labels: frozenset[Category] = field(default_factory=frozenset)
    tags: frozenset[str] = field(default_factory=frozenset)
    of: str = ""
    lang: str = ""

    @property
    def benign(self) -> bool:
        """True when no category applies."""
        return not self.labels


def examples_load(path: Path | str) -> list[Example]:
    """Read a JSONL set; return its examples in file order.

    Raises ``ValueError`` naming the line for a malformed line or an unknown category.
    """
    examples: list[Example] = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                examples.append(
                    Example(
                        text=str(row["text"]),
                        labels=frozenset(Category(c) for c in row.get("labels", [])),
                        tags=frozenset(row.get("tags", [])),
                        of=str(row.get("of", "")),
                        lang=str(row.get("lang", "")),
                    )
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: {exc}") from exc
    return examples

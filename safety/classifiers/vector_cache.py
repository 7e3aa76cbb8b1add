"""Vectors kept between training runs (``--vectors-cache`` of the training commands).

A cache is an ``.npz`` file with arrays ``texts`` (n strings) and ``vecs`` (n x dim
float32): embedding 25,000 texts takes minutes on a shared CPU, and a second run over
the same texts (another budget, grouped and ungrouped folds) needs none of it again.
The cache holds whatever the given ``embed`` returned for a text; it is keyed by the
text only, so one file belongs to one embedding model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np


def vectors_cached(
    texts: Sequence[str],
    embed: Callable[[list[str]], np.ndarray],
    *,
    path: Path | str | None,
    batch: int = 64,
) -> np.ndarray:
    """Return the vectors of ``texts`` (n x dim float32, in order): those found in the
    cache at ``path`` as kept, the others from ``embed`` (called with at most ``batch``
    distinct texts at a time), then the cache rewritten with all of them. Without
    ``path``, every text is embedded (each distinct text once)."""
    known: dict[str, np.ndarray] = {}
    if path is not None and Path(path).exists():
        with np.load(path, allow_pickle=False) as saved:
            known = dict(zip(saved["texts"].tolist(), saved["vecs"], strict=True))
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    for i in range(0, len(missing), batch):
        chunk = missing[i : i + batch]
        known.update(zip(chunk, np.asarray(embed(chunk), np.float32), strict=True))
    if path is not None and missing:
        kept = list(known)
        np.savez(path, texts=np.array(kept), vecs=np.stack([known[t] for t in kept]))
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([known[t] for t in texts]).astype(np.float32)

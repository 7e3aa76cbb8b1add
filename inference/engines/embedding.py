"""The interface of embedding engines, served by embedding pools (DESIGN §6).

An embedding worker (:class:`inference.embed_worker.EmbedWorker`) gathers the jobs
waiting on its pool into one batch and hands the engine their texts at once:
``embed([texts of job 1, texts of job 2, ...])`` returns one :class:`Embedded` per job,
in order. Every vector has ``dim`` float32 values and unit length (L2-normalised), so a
cosine similarity is a dot product and pgvector's cosine distance is ``1 - dot``.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any

from inference.engines.base import EngineError


@dataclass
class Embedded:
    """One job's result: ``vectors`` (one row of ``dim`` floats per input text, a list of
    lists or a 2-d float32 numpy array) and ``tokens``, the input tokens the model read."""

    vectors: Any
    tokens: int


class EmbeddingEngine(abc.ABC):
    """A model that turns texts into unit-length vectors of ``dim`` dimensions.

    Subclasses set ``name``, ``model``, ``dim`` and ``max_batch`` (texts per model call).
    ``max_concurrency`` is 1: a worker runs one batch at a time, and the jobs that arrive
    meanwhile form the next batch (dynamic batching).
    """

    name: str = ""
    model: str = ""
    dim: int = 0
    max_batch: int = 64
    max_concurrency: int = 1

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Load the model (called once before the first batch)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model."""

    def abort(self, job_id: str) -> None:  # noqa: B027 - nothing to abort
        """Embedding jobs are not cancelled mid-batch (a batch takes milliseconds)."""

    @abc.abstractmethod
    async def embed(self, batch: list[list[str]]) -> list[Embedded | EngineError]:
        """Embed each job's texts; return one result per job, in order.

        A job's result is its :class:`Embedded`, or the :class:`EngineError` that failed
        that job alone; raises :class:`EngineError` when the whole batch failed.
        """


def unit_rows(rows: list[list[float]], *, dim: int, source: str) -> list[list[float]]:
    """Return ``rows`` scaled to unit length, checking each has ``dim`` values.

    Raises :class:`EngineError` naming ``source`` for a row of the wrong dimension or a
    zero vector (it has no direction, so no cosine similarity).
    """
    out = []
    for row in rows:
        if len(row) != dim:
            raise EngineError(
                f"{source} returned a {len(row)}-d vector; this pool declares {dim}-d"
            )
        norm = math.sqrt(sum(v * v for v in row))
        if norm == 0.0:
            raise EngineError(f"{source} returned a zero vector")
        out.append([v / norm for v in row])
    return out


def embedding_engine_create(name: str, **options: Any) -> EmbeddingEngine:
    """Instantiate an embedding engine: ``sentence-transformers`` or ``openai``.

    Imported lazily, so only an embedding worker ever loads torch. Raises
    ``ValueError`` for an unknown name.
    """
    if name == "sentence-transformers":
        from inference.engines.sbert import SentenceTransformersEngine

        return SentenceTransformersEngine(**options)
    if name == "openai":
        from inference.engines.openai_embed import OpenAIEmbeddingEngine

        return OpenAIEmbeddingEngine(**options)
    raise ValueError(
        f"unknown embedding engine {name!r}: choose sentence-transformers or openai"
    )

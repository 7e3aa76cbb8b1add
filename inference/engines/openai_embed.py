"""Embedding engine: a remote OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM's
embedding models, Text Embeddings Inference, OpenAI, or another deployment of ours).

Each job of a batch is one ``POST {base_url}/v1/embeddings`` (sent concurrently: the
remote server batches them itself), ``encoding_format: "float"``. The rows are checked
against the pool's declared ``dim`` and scaled to unit length, so stored vectors keep one
contract whatever serves them. Usage comes from the answer's ``usage.prompt_tokens``
(0 when the server sends none).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from inference.engines.base import EngineError
from inference.engines.embedding import Embedded, EmbeddingEngine, unit_rows


class OpenAIEmbeddingEngine(EmbeddingEngine):
    """Embed through a remote server. ``dim`` is the dimension the pool declares.

    ``base_url`` is the server root (a trailing ``/v1`` is accepted); ``timeout_s``
    bounds each request in seconds; ``transport`` replaces httpx's network transport
    (tests stand in for the remote server with it).
    """

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dim: int,
        api_key: str | None = None,
        max_batch: int = 64,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        base = base_url.rstrip("/")
        self.base_url = base[: -len("/v1")] if base.endswith("/v1") else base
        self.model = model
        self.dim = dim
        self.max_batch = max(1, max_batch)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout_s
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        """Open the HTTP connection pool."""
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._headers,
            timeout=self._timeout,
            transport=self._transport,
        )

    async def close(self) -> None:
        """Close the HTTP connection pool."""
        if self._client is not None:
            await self._client.aclose()

    async def _one(self, texts: list[str]) -> Embedded:
        assert self._client is not None, "engine not started"
        if not texts:
            return Embedded(vectors=[], tokens=0)
        try:
            response = await self._client.post(
                "/v1/embeddings",
                json={"model": self.model, "input": texts, "encoding_format": "float"},
            )
        except httpx.HTTPError as exc:
            raise EngineError(f"{self.base_url} is unreachable: {exc}") from exc
        if response.status_code != 200:
            raise EngineError(
                f"{self.base_url} answered {response.status_code}: "
                f"{response.text[:500]}"
            )
        body: dict[str, Any] = response.json()
        data = sorted(body.get("data") or [], key=lambda d: d.get("index", 0))
        if len(data) != len(texts):
            raise EngineError(
                f"{self.base_url} returned {len(data)} vectors for {len(texts)} texts"
            )
        rows = unit_rows(
            [d["embedding"] for d in data], dim=self.dim, source=self.base_url
        )
        usage = body.get("usage") or {}
        return Embedded(vectors=rows, tokens=int(usage.get("prompt_tokens") or 0))

    async def embed(self, batch: list[list[str]]) -> list[Embedded | EngineError]:
        """Send each job's texts as one request, all at once; a failed request is that
        job's :class:`EngineError`, the others still succeed."""
        results = await asyncio.gather(
            *(self._one(texts) for texts in batch), return_exceptions=True
        )
        out: list[Embedded | EngineError] = []
        for result in results:
            if isinstance(result, BaseException) and not isinstance(
                result, EngineError
            ):
                if not isinstance(result, Exception):
                    raise result  # cancellation and the like are not job failures
                result = EngineError(f"{self.base_url}: {result!r}")
            out.append(result)
        return out

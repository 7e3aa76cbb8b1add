"""Remote engine: an OpenAI-compatible server (a ``vllm serve`` fleet, llama.cpp server,
TGI) reached over HTTP with httpx streaming (DESIGN §6).

Each job is one ``POST {base_url}/v1/chat/completions`` with ``stream: true`` and
``stream_options: {"include_usage": true}``; the server-sent ``data:`` chunks carry the
text deltas (JSON strings, so always whole characters) and, last, the exact usage.
``abort(job_id)`` cancels the task reading the stream, which closes the HTTP response
(and its connection), so a server that watches for disconnects (vLLM, llama.cpp) stops
generating at once. When the server sends no usage chunk (older servers, or a cancelled
stream), ``completion_tokens`` falls back to the number of content chunks received (one
token per chunk for vLLM and llama.cpp) and ``prompt_tokens`` to 0.

Tool calling is passed through: the job's ``tools``, ``tool_choice`` and
``parallel_tool_calls`` go in the body as they are (the remote honours them or
answers 400, which fails the job), and the remote's streamed ``delta.tool_calls``
pieces are relayed as :class:`ToolCallDelta` (index, id and name as the remote sent
them, the argument fragments unchanged), its ``finish_reason: "tool_calls"`` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx

from inference import protocol
from inference.engines.base import Delta, Engine, EngineError, Finish, ToolCallDelta
from inference.params import CONTINUE
from inference.protocol import Job, Usage

_FINISH_REASONS = {
    "stop": protocol.FINISH_STOP,
    "length": protocol.FINISH_LENGTH,
    "content_filter": protocol.FINISH_CONTENT_FILTER,
    "abort": protocol.FINISH_CANCELLED,
    "tool_calls": protocol.FINISH_TOOL_CALLS,
    "function_call": protocol.FINISH_TOOL_CALLS,
}
_END = object()
# After [DONE], how long the body's end may take (s) before the connection is closed
# instead of going back to the pool: the answer is complete by then either way.
DRAIN_S = 1.0


async def _drained(pieces: AsyncIterator[bytes]) -> None:
    """Read a response's body to its end after [DONE] (the server ends it there), so
    the connection goes back to the pool for the next job: else every job opened a
    connection of its own (a connect, against https a TLS handshake, per answer).
    A body that does not end within DRAIN_S seconds, or fails, is left to be closed
    with its connection; the answer's finish is already queued."""
    try:
        async with asyncio.timeout(DRAIN_S):
            async for _rest in pieces:
                pass
    except (TimeoutError, httpx.HTTPError):
        pass


async def _data_fields(pieces: AsyncIterator[bytes]) -> AsyncGenerator[str, None]:
    """The ``data:`` fields of a server-sent event stream's lines, in order, from
    its body's byte pieces (a line may span pieces; lines end with LF, CRLF or CR).

    Split as bytes and only the data lines decoded (UTF-8, bad bytes as U+FFFD,
    what httpx's ``aiter_lines`` does for an event stream), so the other lines
    (``event:``, comments, the blank line after each event) cost no decoding.
    """
    rest = b""
    async for piece in pieces:
        lines = (
            (rest + piece).splitlines(keepends=True)
            if rest
            else piece.splitlines(keepends=True)
        )
        rest = lines.pop() if lines and not lines[-1].endswith((b"\n", b"\r")) else b""
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:].strip().decode("utf-8", "replace")
    if rest.startswith(b"data:"):
        yield rest[5:].strip().decode("utf-8", "replace")


def _usage_from(raw: dict[str, Any]) -> Usage:
    details = raw.get("prompt_tokens_details") or {}
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        completion_tokens=int(raw.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
    )


def _error(base_url: str, status: int, detail: str) -> EngineError:
    """Map a server error (HTTP status and body) to an EngineError and its code."""
    lowered = detail.lower()
    overflow = "context" in lowered and ("length" in lowered or "window" in lowered)
    return EngineError(
        f"{base_url} answered {status}: {detail[:500]}",
        code=protocol.ERROR_CONTEXT_OVERFLOW if overflow else protocol.ERROR_ENGINE,
    )


def _tool_call_delta(call: dict[str, Any]) -> ToolCallDelta:
    """The :class:`ToolCallDelta` of one remote ``delta.tool_calls[]`` piece."""
    function = call.get("function") or {}
    return ToolCallDelta(
        index=int(call.get("index") or 0),
        arguments=function.get("arguments") or "",
        id=call.get("id") or None,
        name=function.get("name") or None,
    )


class OpenAIEngine(Engine):
    """Stream chat completions from a remote OpenAI-compatible server.

    ``base_url`` is the server root (``http://host:port``; a trailing ``/v1`` is
    accepted), ``model`` the served model name, ``api_key`` an optional bearer token.
    ``connect_timeout_s`` bounds connecting; ``read_timeout_s`` bounds the wait for each
    chunk (seconds). ``max_concurrency`` is how many jobs one worker streams at once.
    """

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        max_concurrency: int = 8,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 120.0,
    ) -> None:
        base = base_url.rstrip("/")
        self.base_url = base[: -len("/v1")] if base.endswith("/v1") else base
        self.model = model
        self.max_concurrency = max(1, max_concurrency)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        self._ssl: ssl.SSLContext | None = None
        self._slots = asyncio.Semaphore(self.max_concurrency + 2)
        self._idle: list[httpx.AsyncClient] = []  # last used first: warm connections
        self._clients: list[httpx.AsyncClient] = []
        self._readers: dict[str, asyncio.Task[None]] = {}
        self._aborted: set[str] = set()

    async def start(self) -> None:
        """Make the TLS context the connections share (certificates loaded once)."""
        self._ssl = httpx.create_ssl_context()

    async def close(self) -> None:
        """Close every connection."""
        clients, self._clients, self._idle = self._clients, [], []
        for client in clients:
            await client.aclose()

    def _client_take(self) -> httpx.AsyncClient:
        """A client of one connection for a job: the last one given back, else a
        new one (at most ``max_concurrency + 2``, which ``_slots`` bounds).

        One client per running job rather than one pool of them all: httpcore's
        pool visits every connection (a readability check on each idle socket)
        when a request starts and when a response closes, which at 50 running
        jobs cost more of the worker's CPU than reading the answers."""
        if self._idle:
            return self._idle.pop()
        assert self._ssl is not None, "engine not started"
        client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._headers,
            timeout=self._timeout,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            verify=self._ssl,
        )
        self._clients.append(client)
        return client

    def abort(self, job_id: str) -> None:
        """Close ``job_id``'s stream now (or make it finish cancelled before it opens).

        Call from the event loop that runs :meth:`generate`.
        """
        self._aborted.add(job_id)
        reader = self._readers.get(job_id)
        if reader is not None and not reader.done():
            reader.cancel()

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        """Return the prompt tokens of ``messages`` as the server counts them.

        Uses vLLM's ``POST /tokenize`` (chat template applied by the server). Raises
        :class:`EngineError` when the server does not offer it (e.g. llama.cpp).
        """
        try:
            resp = httpx.post(
                f"{self.base_url}/tokenize",
                json={"model": self.model, "messages": messages},
                headers=self._headers,
                timeout=self._timeout,
            )
            resp.raise_for_status()
            return int(resp.json()["count"])
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            raise EngineError(f"{self.base_url} cannot count tokens: {exc}") from exc

    def _body(self, job: Job) -> dict[str, Any]:
        params = job.params
        body: dict[str, Any] = {
            "model": self.model,
            "messages": job.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": job.max_tokens,
            "temperature": float(params.get("temperature", 0.7)),
            "top_p": float(params.get("top_p", 0.95)),
        }
        for name in ("stop", "seed", "presence_penalty", "frequency_penalty"):
            if params.get(name) is not None:
                body[name] = params[name]
        if params.get("logit_bias"):
            body["logit_bias"] = params["logit_bias"]
        fmt = params.get("response_format")
        if fmt and fmt.get("type") == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": fmt["schema"]},
            }
        elif fmt:
            body["response_format"] = fmt
        for name in ("tools", "tool_choice", "parallel_tool_calls"):
            if params.get(name) is not None:
                body[name] = params[name]
        if params.get("ignore_eos"):
            body["ignore_eos"] = True  # vLLM extension (benchmarks, tests)
        if params.get(CONTINUE):  # vLLM's extension: write on from the last message
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        return body

    async def _read(self, job: Job, items: asyncio.Queue[Any]) -> None:
        """Stream one completion into ``items``: str deltas, then (reason, usage|None)."""
        async with self._slots:
            client = self._client_take()
            try:
                await self._stream(client, job, items)
            finally:
                self._idle.append(client)

    async def _stream(
        self, client: httpx.AsyncClient, job: Job, items: asyncio.Queue[Any]
    ) -> None:
        try:
            async with client.stream(
                "POST", "/v1/chat/completions", json=self._body(job)
            ) as resp:
                if resp.status_code >= 400:
                    detail = (await resp.aread()).decode(errors="replace")
                    raise _error(self.base_url, resp.status_code, detail)
                pieces = resp.aiter_bytes()
                fields = _data_fields(pieces)
                async with contextlib.aclosing(fields):  # pieces go on to the drain
                    finish, usage = await self._chunks(fields, items)
                if finish is None:
                    # no finish_reason and no [DONE]: the server broke the stream off
                    raise EngineError(f"{self.base_url} ended the stream mid-answer")
                items.put_nowait(
                    (_FINISH_REASONS.get(finish, protocol.FINISH_STOP), usage)
                )
                await _drained(pieces)
        except httpx.HTTPError as exc:
            items.put_nowait(EngineError(f"{self.base_url} failed: {exc!r}"))
        except EngineError as exc:
            items.put_nowait(exc)
        except ValueError as exc:
            items.put_nowait(EngineError(f"{self.base_url} sent a bad chunk: {exc}"))

    async def _chunks(
        self, fields: AsyncIterator[str], items: asyncio.Queue[Any]
    ) -> tuple[str | None, Usage | None]:
        """Put the deltas of the stream's ``data:`` ``fields`` into ``items`` up to
        ``[DONE]``; return the remote finish reason (None: the stream ended without
        one) and its usage (None: it sent none). Raises :class:`EngineError` on an
        error chunk, ValueError on one that is not JSON."""
        finish: str | None = None
        usage: Usage | None = None
        async for data in fields:
            if data == "[DONE]":
                return finish or "stop", usage
            chunk = json.loads(data)
            if chunk.get("error"):
                raise _error(self.base_url, 200, json.dumps(chunk["error"]))
            if chunk.get("usage"):
                usage = _usage_from(chunk["usage"])
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                text = delta.get("content")
                if text:
                    items.put_nowait(text)
                for call in delta.get("tool_calls") or ():
                    items.put_nowait(_tool_call_delta(call))
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
        return finish, usage

    async def generate(self, job: Job) -> AsyncIterator[Delta | ToolCallDelta | Finish]:
        """Yield the remote deltas, then a Finish with the server's usage.

        Raises :class:`EngineError` on a connection failure, an HTTP error status or
        an error chunk (code ``context_overflow`` when the server says the prompt is
        over its context length), or a stream that ends without finishing.
        """
        items: asyncio.Queue[Any] = asyncio.Queue()
        reader = asyncio.create_task(self._read(job, items))
        # also when the reader is cancelled before it ever ran
        reader.add_done_callback(lambda _task: items.put_nowait(_END))
        self._readers[job.job_id] = reader
        if job.job_id in self._aborted:
            reader.cancel()
        chunks = 0
        result: tuple[str, Usage | None] | None = None
        try:
            while True:
                item = await items.get()
                if item is _END:
                    break
                if isinstance(item, Exception):
                    raise item
                if isinstance(item, tuple):
                    result = item
                    continue
                chunks += 1
                yield item if isinstance(item, ToolCallDelta) else Delta(item)
            if job.job_id in self._aborted or result is None:
                reason, usage = protocol.FINISH_CANCELLED, None
            else:
                reason, usage = result
            yield Finish(reason, usage or Usage(completion_tokens=chunks))
        finally:
            if not reader.done():
                reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            self._readers.pop(job.job_id, None)
            self._aborted.discard(job.job_id)

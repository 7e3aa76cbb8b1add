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
        # jobs whose generate waits on the server, and its task (abort cancels it)
        self._reading: dict[str, asyncio.Task[Any]] = {}
        self._cancelled: set[str] = set()  # jobs abort cancelled while reading
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
        reading = self._reading.pop(job_id, None)
        if reading is not None:
            self._cancelled.add(job_id)
            reading.cancel()

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

    def _deltas(self, data: str) -> tuple[list[Delta | ToolCallDelta], Any, Any]:
        """The deltas of one ``data:`` chunk (JSON), its finish reason and its usage
        (each None when it has none). Raises :class:`EngineError` on an error chunk,
        ValueError on one that is not JSON."""
        chunk = json.loads(data)
        if chunk.get("error"):
            raise _error(self.base_url, 200, json.dumps(chunk["error"]))
        raw_usage = chunk.get("usage")
        usage = _usage_from(raw_usage) if raw_usage else None
        out: list[Delta | ToolCallDelta] = []
        finish = None
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                out.append(Delta(text))
            for call in delta.get("tool_calls") or ():
                out.append(_tool_call_delta(call))
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
        return out, finish, usage

    async def generate(self, job: Job) -> AsyncIterator[Delta | ToolCallDelta | Finish]:
        """Yield the remote deltas, then a Finish with the server's usage.

        The body is read in the task that iterates this (no reader task and queue
        between, which cost a task wake-up per chunk): iterate it from one task.
        :meth:`abort` cancels that task while it waits on the server (the cancel is
        taken back here, and the stream ends cancelled), else the next step ends it.

        Raises :class:`EngineError` on a connection failure, an HTTP error status or
        an error chunk (code ``context_overflow`` when the server says the prompt is
        over its context length), or a stream that ends without finishing.
        """
        job_id = job.job_id
        task = asyncio.current_task()
        assert task is not None, "generate runs in a task"
        chunks = 0
        usage: Usage | None = None
        finish: str | None = None  # the remote's, None until it sent one
        try:
            if job_id not in self._aborted:
                try:
                    self._reading[job_id] = task  # abort may cancel it from here
                    async with self._slots:
                        client = self._client_take()
                        try:
                            async with client.stream(
                                "POST", "/v1/chat/completions", json=self._body(job)
                            ) as resp:
                                if resp.status_code >= 400:
                                    detail = await resp.aread()
                                    raise _error(
                                        self.base_url,
                                        resp.status_code,
                                        detail.decode(errors="replace"),
                                    )
                                pieces = resp.aiter_bytes()
                                fields = _data_fields(pieces)
                                async with contextlib.aclosing(fields):
                                    async for data in fields:
                                        if data == "[DONE]":
                                            finish = finish or "stop"
                                            break
                                        out, reason, got = self._deltas(data)
                                        usage = got or usage
                                        finish = reason or finish
                                        for item in out:
                                            del self._reading[job_id]
                                            chunks += 1
                                            yield item
                                            if job_id in self._aborted:
                                                break
                                            self._reading[job_id] = task
                                        if job_id in self._aborted:
                                            break
                                self._reading.pop(job_id, None)
                                if job_id not in self._aborted:
                                    if finish is None:
                                        # no finish_reason and no [DONE]: broken off
                                        raise EngineError(
                                            f"{self.base_url} ended the stream "
                                            "mid-answer"
                                        )
                                    yield Finish(
                                        _FINISH_REASONS.get(
                                            finish, protocol.FINISH_STOP
                                        ),
                                        usage or Usage(completion_tokens=chunks),
                                    )
                                    await _drained(pieces)
                                    return
                        finally:
                            self._idle.append(client)
                except asyncio.CancelledError:
                    if job_id not in self._cancelled:
                        raise  # not abort's
                    self._cancelled.discard(job_id)
                    if task.uncancel() > 0:
                        raise  # cancelled from outside as well
                except httpx.HTTPError as exc:
                    raise EngineError(f"{self.base_url} failed: {exc!r}") from exc
                except ValueError as exc:
                    raise EngineError(
                        f"{self.base_url} sent a bad chunk: {exc}"
                    ) from exc
            # aborted: closed with its response, so the server stops generating
            yield Finish(protocol.FINISH_CANCELLED, Usage(completion_tokens=chunks))
        finally:
            self._reading.pop(job_id, None)
            self._aborted.discard(job_id)
            self._cancelled.discard(job_id)

"""A deterministic engine for tests and benchmarks (never for users).

It "generates" a given text as a sequence of byte chunks, with a per-chunk delay and
optional failure injection, so the worker path (UTF-8 reassembly, cancel, errors) can be
exercised exactly. Options come from the constructor and can be overridden per job with
``job.params["script"]``:

- ``text`` (str): what to emit. ``cycle`` (bool): repeat it until ``max_tokens``.
- ``chunk_bytes`` (int|None): emit UTF-8 slices of this many bytes (splitting characters);
  default: one word (with its leading space) per token.
- ``delay_ms`` (float): sleep before each token, in milliseconds.
- ``stop`` (the job's OpenAI ``stop`` strings, not a script option): the text is cut
  before the first one, finish ``stop``.
- ``tool_calls`` (list): calls emitted after the text when the job offers ``tools``,
  each ``{"name": str, "arguments": str, "id"?: str, "pieces"?: [int, ...]}``;
  ``pieces`` are the lengths (UTF-8 bytes) of the argument pieces sent as separate
  :class:`ToolCallDelta` items (the rest goes in a last piece; default: the whole
  string in the first piece), so a test chooses the split points, also inside a
  character (its bytes are held for the next piece, as an engine's decoder does). Each piece costs
  one completion token; the finish reason is ``tool_calls``. ``call_text`` (str|None):
  the text emitted before the calls instead of ``text`` when the job makes calls. ``tool_choice``
  ``"none"`` emits none, a named function only its calls, ``parallel_tool_calls``
  false only the first; ``"required"`` or a named function the script has no call
  for cannot be honoured: :class:`EngineError` ``invalid_parameter`` (a 400).
- ``first_delay_ms`` (float): sleep this long before the first token too (a long
  prompt being read before the answer starts).
- ``rest_delay_ms`` (float): sleep this long after the first token, before the rest
  of the answer and its end (a benchmark keeps the answer's end and its settlement
  out of a POST-to-first-token window; the job can still be cancelled meanwhile).
- ``continue_final_message`` (the job's parameter, :data:`inference.params.CONTINUE`):
  the job continues its last (assistant) message; when the text starts with that
  message's text (or, with ``cycle``, its repetition does), the script writes on
  from there instead of starting again.
- ``fail_after`` (int|None): raise :class:`EngineError` after this many tokens (0 = before
  the first token); ``fail_code`` (str): its error code (default ``engine_error``).

Token accounting: one emitted chunk is one completion token; a prompt costs one token per
whitespace-separated word plus 4 per message (a stand-in for a chat template).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

from inference import protocol
from inference.engines.base import (
    Delta,
    Engine,
    EngineError,
    Finish,
    StopText,
    ToolCallDelta,
    Utf8Decoder,
)
from inference.params import CONTINUE, ERROR_INVALID_PARAMETER
from inference.protocol import Job, Usage

DEFAULT_TEXT = (
    "This is a scripted answer from the test engine. It streams word by word, "
    "so the whole path from worker to browser can be checked exactly."
)


def _written_on(text: str, written: str, cycle: bool) -> str:
    """The script's text after ``written`` (what the answer being continued holds),
    when that is where the script got to: the rest of ``text``, or with ``cycle`` the
    repetition rotated to go on from there; ``text`` itself otherwise."""
    if not text or not written:
        return text
    if not cycle:
        return text[len(written) :] if text.startswith(written) else text
    repeated = text * (len(written) // len(text) + 1)
    if not repeated.startswith(written):
        return text
    at = len(written) % len(text)
    return text[at:] + text[:at]


class ScriptedEngine(Engine):
    """Deterministic text with configurable delay and failures (see module docstring)."""

    name = "scripted"

    def __init__(
        self,
        *,
        text: str = DEFAULT_TEXT,
        delay_ms: float = 0.0,
        chunk_bytes: int | None = None,
        fail_after: int | None = None,
        cycle: bool = False,
        tool_calls: list[dict[str, Any]] | None = None,
        call_text: str | None = None,
        first_delay_ms: float = 0.0,
        rest_delay_ms: float = 0.0,
        max_concurrency: int = 8,
        model: str = "scripted-1",
    ) -> None:
        self.defaults: dict[str, Any] = {
            "text": text,
            "delay_ms": delay_ms,
            "chunk_bytes": chunk_bytes,
            "fail_after": fail_after,
            "cycle": cycle,
            "tool_calls": tool_calls or [],
            "call_text": call_text,
            "first_delay_ms": first_delay_ms,
            "rest_delay_ms": rest_delay_ms,
        }
        self.max_concurrency = max_concurrency
        self.model = model
        self._aborted: set[str] = set()

    @staticmethod
    def _chunks(text: str, chunk_bytes: int | None) -> list[bytes]:
        if chunk_bytes:
            raw = text.encode()
            return [raw[i : i + chunk_bytes] for i in range(0, len(raw), chunk_bytes)]
        return [w.encode() for w in re.findall(r"\s*\S+|\s+$", text)]

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        """Return 4 per message plus one per whitespace-separated word (of the
        content and of any tool call's name and arguments)."""
        return sum(
            4
            + len(str(m.get("content") or "").split())
            + sum(
                len(f"{c['function']['name']} {c['function']['arguments']}".split())
                for c in m.get("tool_calls") or ()
            )
            for m in messages
        )

    @staticmethod
    def _calls(job: Job, scripted: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The scripted calls the job's tool parameters allow (module docstring)."""
        params = job.params
        if not params.get("tools"):
            return []
        choice = params.get("tool_choice", "auto")
        if choice == "none":
            return []
        calls = list(scripted)
        if isinstance(choice, dict):
            calls = [c for c in calls if c["name"] == choice["function"]["name"]]
        if params.get("parallel_tool_calls") is False:
            calls = calls[:1]
        if not calls and choice != "auto":
            raise EngineError(
                f"The script has no call that honours tool_choice {choice!r}.",
                code=ERROR_INVALID_PARAMETER,
            )
        return calls

    @staticmethod
    def _call_deltas(index: int, call: dict[str, Any]) -> list[ToolCallDelta]:
        """The pieces of scripted call ``index``: its arguments' UTF-8 bytes cut at the
        ``pieces`` lengths and decoded as an engine does (the bytes of a character
        cut in two wait for the next piece; a later piece left empty is not sent)."""
        raw = call["arguments"].encode()
        cuts, start = [], 0
        for size in call.get("pieces") or ():
            cuts.append(raw[start : start + size])
            start += size
        if start < len(raw) or not cuts:
            cuts.append(raw[start:])
        decoder = Utf8Decoder()
        texts = [decoder.feed(cut) for cut in cuts]
        deltas = [ToolCallDelta(index=index, arguments=texts[0])]
        deltas += [ToolCallDelta(index=index, arguments=t) for t in texts[1:] if t]
        deltas[0].id = call.get("id") or f"call_scripted{index}"
        deltas[0].name = call["name"]
        return deltas

    def abort(self, job_id: str) -> None:
        """Mark ``job_id`` aborted; its generator stops before the next token."""
        self._aborted.add(job_id)

    async def generate(self, job: Job) -> AsyncIterator[Delta | ToolCallDelta | Finish]:
        """Emit the scripted chunks (see module docstring); end with a :class:`Finish`."""
        opts = {**self.defaults, **(job.params.get("script") or {})}
        calls = self._calls(job, opts["tool_calls"])
        text = opts["text"]
        if calls and opts.get("call_text") is not None:
            text = opts["call_text"]
        if job.params.get(CONTINUE) and job.messages:
            text = _written_on(
                text, str(job.messages[-1].get("content") or ""), opts["cycle"]
            )
        chunks = self._chunks(text, opts["chunk_bytes"])
        if not chunks and not calls:
            chunks = [b""]  # an empty answer is still one token
        usage = Usage(prompt_tokens=self.count_tokens(job.messages))
        decoder = Utf8Decoder()
        stopper = StopText(job.params.get("stop"))
        delay_s = float(opts["delay_ms"]) / 1000.0
        rest_s = float(opts["rest_delay_ms"]) / 1000.0
        fail_after = opts["fail_after"]
        finish_reason = protocol.FINISH_STOP
        i = 0
        try:
            if opts["first_delay_ms"]:
                await asyncio.sleep(float(opts["first_delay_ms"]) / 1000.0)
            while True:
                if job.job_id in self._aborted:
                    finish_reason = protocol.FINISH_CANCELLED
                    break
                if usage.completion_tokens >= job.max_tokens:
                    finish_reason = protocol.FINISH_LENGTH
                    break
                if i >= len(chunks):
                    if not opts["cycle"] or not chunks:
                        break
                    i = 0
                if fail_after is not None and usage.completion_tokens >= int(
                    fail_after
                ):
                    raise EngineError(
                        f"Scripted failure ({opts.get('fail_code') or 'engine_error'}).",
                        code=opts.get("fail_code") or protocol.ERROR_ENGINE,
                    )
                if delay_s:
                    await asyncio.sleep(delay_s)
                    if job.job_id in self._aborted:
                        finish_reason = protocol.FINISH_CANCELLED
                        break
                text = stopper.feed(decoder.feed(chunks[i]))
                i += 1
                usage.completion_tokens += 1
                if text:
                    yield Delta(text)
                if i == 1 and rest_s:  # the rest and the end held back
                    await asyncio.sleep(rest_s)
                if stopper.hit:
                    finish_reason = protocol.FINISH_STOP
                    break
            tail = stopper.feed(decoder.flush()) + stopper.flush()
            if tail:
                yield Delta(tail)
            if finish_reason == protocol.FINISH_STOP:
                for index, call in enumerate(calls):
                    for piece in self._call_deltas(index, call):
                        if delay_s:
                            await asyncio.sleep(delay_s)
                        usage.completion_tokens += 1
                        yield piece
                if calls:
                    finish_reason = protocol.FINISH_TOOL_CALLS
            yield Finish(finish_reason, usage)
        finally:
            self._aborted.discard(job.job_id)

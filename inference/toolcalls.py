"""Tool calls in generated text: the Hermes/Qwen ``<tool_call>`` format, streamed.

Models without a tool parser of their own (llama.cpp's GGUF chat models) are told to
answer a call as::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

:class:`ToolCallExtractor` is fed the generated text piece by piece and returns what can
be released: :class:`~inference.engines.base.Delta` content (text before a call; text
that might begin ``<tool_call>`` is held back until the next piece settles it) and
:class:`~inference.engines.base.ToolCallDelta` pieces. A call's first piece carries
``id`` (``call_`` + 24 hex digits), ``name`` and ``arguments=""``; the arguments then
stream as they are generated: the raw JSON text of the ``"arguments"`` value exactly as
the model wrote it (never re-serialised), tracked by JSON string, escape and nesting
state, so a ``</tool_call>``, a brace or an escaped quote inside a string argument does
not end it. A call written without ``"arguments"`` (``{"name": "now"}``) has ``"{}"``.

Every decision depends on the text alone, never on where it was split, so any split of
the same text gives the same content and the same arguments once the pieces are joined
(:func:`extract` is the one-piece reading).

A call is recognised once its header is complete: ``<tool_call>``, ``{``, ``"name"``,
the name of an offered tool, then ``, "arguments": {`` (or the closing ``}``). Text
that cannot become such a header (not JSON, an unknown tool, arguments that are not an
object, ``"arguments"`` before ``"name"``) is released as content, never an error.
After the arguments' closing brace everything up to ``</tool_call>`` is dropped. After a
call only another ``<tool_call>`` (with ``parallel``) may follow: any other text ends the
generation (:attr:`ToolCallExtractor.done`) and is dropped. A call cut off by the token
limit keeps the arguments streamed so far (:attr:`ToolCallExtractor.in_call`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from inference.engines.base import Delta, ToolCallDelta

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_WS = " \t\r\n"

_CONTENT, _HEADER, _ARGS, _TAIL, _AFTER, _DONE = range(6)


def new_call_id() -> str:
    """Return a fresh tool call id: ``call_`` and 24 random hex digits."""
    return "call_" + secrets.token_hex(12)


def _held(text: str, marker: str) -> int:
    """Return the length of the longest end of ``text`` that begins ``marker``."""
    for k in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


@dataclass
class _Header:
    name: str
    end: int  # index in the buffer just after the header
    no_arguments: bool  # the call object closed after the name


def _header(buf: str, names: set[str]) -> _Header | bool:
    """Read a call header at the start of ``buf`` (the text after ``<tool_call>``).

    Returns the header when complete, True when ``buf`` may still become one (more text
    needed), False when it cannot.
    """
    pos = 0
    n = len(buf)

    def ws(p: int) -> int:
        while p < n and buf[p] in _WS:
            p += 1
        return p

    def literal(p: int, lit: str) -> int | bool:
        """Index after ``lit`` at ``p``; True if ``buf`` ends inside it; False if not."""
        got = buf[p : p + len(lit)]
        if got == lit:
            return p + len(lit)
        return lit.startswith(got) and p + len(got) == n

    def step(p: int | bool, lit: str) -> int | bool:
        if p is True or p is False:
            return p
        p = ws(p)
        if p >= n:
            return True
        return literal(p, lit)

    pos_or = step(pos, "{")
    pos_or = step(pos_or, '"name"')
    pos_or = step(pos_or, ":")
    pos_or = step(pos_or, '"')
    if isinstance(pos_or, bool):
        return pos_or
    start = pos_or - 1
    p = pos_or
    escape = False
    while p < n:
        c = buf[p]
        if escape:
            escape = False
        elif c == "\\":
            escape = True
        elif c == '"':
            break
        p += 1
    else:
        return True
    try:
        name = json.loads(buf[start : p + 1])
    except ValueError:
        return False
    if name not in names:
        return False
    p = ws(p + 1)
    if p >= n:
        return True
    if buf[p] == "}":
        return _Header(name=name, end=p + 1, no_arguments=True)
    after: int | bool = step(p, ",")
    after = step(after, '"arguments"')
    after = step(after, ":")
    after = step(after, "{")
    if isinstance(after, bool):
        return after
    return _Header(name=name, end=after - 1, no_arguments=False)


class ToolCallExtractor:
    """Split generated text into content and tool calls as it streams (module doc).

    ``names``: the offered tools' names (a call to another name is content);
    ``parallel``: whether more than one call may be made (OpenAI's
    ``parallel_tool_calls``); ``id_factory``: makes call ids (:func:`new_call_id`).
    """

    def __init__(
        self,
        *,
        names: Iterable[str],
        parallel: bool = True,
        id_factory: Callable[[], str] = new_call_id,
    ) -> None:
        self.names = set(names)
        self.parallel = parallel
        self.id_factory = id_factory
        self.calls = 0
        self._state = _CONTENT
        self._buf = ""
        self._depth = 0
        self._in_string = False
        self._escape = False

    @property
    def done(self) -> bool:
        """True once the calls are over: the generation should stop."""
        return self._state == _DONE

    @property
    def in_call(self) -> bool:
        """True while a call's arguments are still open."""
        return self._state == _ARGS

    def feed(self, text: str) -> list[Delta | ToolCallDelta]:
        """Return the content and call pieces released after adding ``text``."""
        if self._state == _DONE:
            return []
        self._buf += text
        out: list[Delta | ToolCallDelta] = []
        while self._step(out):
            pass
        return out

    def flush(self) -> list[Delta | ToolCallDelta]:
        """Return what is left at the end of the generation: held-back content, or an
        unfinished header released as content."""
        out: list[Delta | ToolCallDelta] = []
        if self._state == _CONTENT and self._buf:
            out.append(Delta(self._buf))
        elif self._state == _HEADER:
            out.append(Delta(OPEN + self._buf))
        self._buf = ""
        self._state = _DONE
        return out

    def _step(self, out: list[Delta | ToolCallDelta]) -> bool:
        """Process the buffer in the current state; True if the state changed and the
        buffer should be processed again."""
        buf = self._buf
        if self._state == _CONTENT:
            i = buf.find(OPEN)
            cut = i if i >= 0 else len(buf) - _held(buf, OPEN)
            if cut:
                out.append(Delta(buf[:cut]))
            if i < 0:
                self._buf = buf[cut:]
                return False
            self._buf = buf[i + len(OPEN) :]
            self._state = _HEADER
            return True
        if self._state == _HEADER:
            header = _header(buf, self.names)
            if header is True:
                return False
            if header is False:
                out.append(Delta(OPEN))  # not a call: the text is content
                self._state = _CONTENT
                return True
            assert isinstance(header, _Header)
            out.append(
                ToolCallDelta(
                    index=self.calls,
                    arguments="",
                    id=self.id_factory(),
                    name=header.name,
                )
            )
            self._buf = buf[header.end :]
            if header.no_arguments:
                out.append(ToolCallDelta(index=self.calls, arguments="{}"))
                self.calls += 1
                self._state = _TAIL
            else:
                self._depth, self._in_string, self._escape = 0, False, False
                self._state = _ARGS
            return True
        if self._state == _ARGS:
            end = self._scan(buf)
            piece = buf if end is None else buf[:end]
            if piece:
                out.append(ToolCallDelta(index=self.calls, arguments=piece))
            if end is None:
                self._buf = ""
                return False
            self._buf = buf[end:]
            self.calls += 1
            self._state = _TAIL
            return True
        if self._state == _TAIL:
            i = buf.find(CLOSE)
            if i < 0:
                self._buf = buf[len(buf) - _held(buf, CLOSE) :]
                return False
            self._buf = buf[i + len(CLOSE) :]
            self._state = _AFTER if self.parallel else _DONE
            return True
        if self._state == _AFTER:
            rest = buf.lstrip(_WS)
            if not rest:
                self._buf = ""
                return False
            if rest.startswith(OPEN):
                self._buf = rest[len(OPEN) :]
                self._state = _HEADER
                return True
            if OPEN.startswith(rest):
                self._buf = rest
                return False
            self._buf = ""
            self._state = _DONE
            return False
        return False

    def _scan(self, buf: str) -> int | None:
        """Advance the JSON state over ``buf``; return the index just after the
        arguments' closing brace, or None if they are still open."""
        depth, in_string, escape = self._depth, self._in_string, self._escape
        end = None
        for i, c in enumerate(buf):
            if in_string:
                if escape:
                    escape = False
                elif c == "\\":
                    escape = True
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    end = i + 1
                    break
        self._depth, self._in_string, self._escape = depth, in_string, escape
        return end


@dataclass
class ExtractedCall:
    """One whole tool call: its id, function name and JSON arguments text."""

    id: str
    name: str
    arguments: str


def extract(
    text: str,
    *,
    names: Iterable[str],
    parallel: bool = True,
    id_factory: Callable[[], str] = new_call_id,
) -> tuple[str, list[ExtractedCall]]:
    """Read a whole generated ``text``: return its content and its tool calls."""
    extractor = ToolCallExtractor(names=names, parallel=parallel, id_factory=id_factory)
    pieces = extractor.feed(text) + extractor.flush()
    return join(pieces)


def join(pieces: Iterable[Delta | ToolCallDelta]) -> tuple[str, list[ExtractedCall]]:
    """Assemble streamed pieces: the content text and the calls by index."""
    content: list[str] = []
    calls: list[ExtractedCall] = []
    for piece in pieces:
        if isinstance(piece, Delta):
            content.append(piece.text)
        elif piece.id is not None:
            calls.append(ExtractedCall(piece.id, piece.name or "", piece.arguments))
        else:
            calls[piece.index].arguments += piece.arguments
    return "".join(content), calls

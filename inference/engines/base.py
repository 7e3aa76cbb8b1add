"""The engine interface every backend implements (DESIGN §6).

``generate(job)`` is an async iterator of :class:`Delta` (text, whole Unicode characters)
and :class:`ToolCallDelta` (pieces of tool calls, only when the job offers ``tools``)
that always ends with exactly one :class:`Finish` carrying the finish reason and the exact
token usage. ``abort(job_id)`` makes the running generation finish with
``finish_reason="cancelled"`` within one decode step.
"""

from __future__ import annotations

import abc
import codecs
from collections.abc import AsyncIterator
from dataclasses import dataclass

from inference.protocol import Job, Usage


@dataclass
class Delta:
    """A piece of generated text: one or more whole Unicode characters."""

    text: str


@dataclass
class ToolCallDelta:
    """A piece of a tool call the model makes (a ``tool_call`` event, DESIGN §5).

    ``index`` numbers the calls of one generation from 0 in the order they are made.
    The first piece of a call carries ``id`` (``call_…``) and ``name``; its
    ``arguments`` may be ``""``. Later pieces carry only argument text. The call's
    JSON arguments are its pieces' ``arguments`` joined in order: exactly the string
    a non-streamed generation returns (``"{}"`` for a tool without parameters).
    """

    index: int
    arguments: str
    id: str | None = None
    name: str | None = None


@dataclass
class Finish:
    """The end of a generation: why it stopped and its exact token usage."""

    finish_reason: str
    usage: Usage


class EngineError(Exception):
    """A generation failed inside the engine; ``code`` is the protocol error code."""

    def __init__(self, message: str, *, code: str = "engine_error"):
        super().__init__(message)
        self.code = code


class Utf8Decoder:
    """Turn a stream of byte pieces into whole-character text.

    Bytes of a character split across pieces are held back until the character is
    complete; invalid bytes become U+FFFD instead of raising (DESIGN §5). A character
    left incomplete when the stream ends (an answer cut at its token limit in the
    middle of a multi-byte character) is dropped, not shown as U+FFFD.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        """Return the complete characters available after adding ``piece``."""
        return self._decoder.decode(piece)

    def flush(self) -> str:
        """Return what is left at the end of the stream: nothing, as the decoder holds
        back only the start of a character that never completed (dropped)."""
        self._decoder.reset()
        return ""


class Engine(abc.ABC):
    """A model backend. Subclasses set ``name``, ``model`` and ``max_concurrency``."""

    name: str = ""
    model: str = ""
    max_concurrency: int = 1

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Load the model (called once before the first job)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model."""

    @abc.abstractmethod
    def generate(self, job: Job) -> AsyncIterator[Delta | ToolCallDelta | Finish]:
        """Yield the job's text deltas, then one :class:`Finish`.

        Raises :class:`EngineError` when generation fails.
        """

    @abc.abstractmethod
    def abort(self, job_id: str) -> None:
        """Stop the running generation ``job_id`` (no-op if it is not running)."""

    @abc.abstractmethod
    def count_tokens(self, messages: list[dict[str, str]]) -> int:
        """Return the prompt tokens of ``messages`` under the model's chat template."""


class StopText:
    """Cut generated text before the first of the ``stop`` strings (OpenAI's ``stop``).

    :meth:`feed` returns the text that can be released: text that might begin a stop
    string is held back until the next piece settles it. Once a stop string appears,
    ``hit`` is True and nothing after it (nor the stop string itself) is released.
    With no stop strings every piece passes through unchanged.
    """

    def __init__(self, stop: list[str] | None = None) -> None:
        self.stops = [s for s in stop or [] if s]
        self.pending = ""
        self.hit = False

    def feed(self, text: str) -> str:
        """Return the releasable text after adding ``text`` (whole characters)."""
        if not self.stops:
            return text
        if self.hit:
            return ""
        self.pending += text
        found = [i for s in self.stops if (i := self.pending.find(s)) >= 0]
        if found:
            out, self.pending, self.hit = self.pending[: min(found)], "", True
            return out
        keep = 0
        for k in range(min(len(self.pending), max(map(len, self.stops)) - 1), 0, -1):
            tail = self.pending[-k:]
            if any(s.startswith(tail) for s in self.stops):
                keep = k
                break
        cut = len(self.pending) - keep
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def flush(self) -> str:
        """Return the held-back text at the end of the generation ("" after a hit)."""
        out, self.pending = ("" if self.hit else self.pending), ""
        return out

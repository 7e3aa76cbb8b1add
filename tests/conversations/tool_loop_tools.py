"""Tools and an engine for the tool loop's tests (CHAT_TOOLS_PROVIDER points here).

- ``echo``: returns its ``text`` argument (``SAID`` overrides what it returns);
- ``wait``: runs until cancelled, recording that it started and was cancelled.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass
from typing import Any

from inference import protocol
from inference.engines.base import Delta, Finish, ToolCallDelta
from inference.engines.scripted import ScriptedEngine
from inference.protocol import Usage

SAID: dict[str, str] = {}
# run (in a thread) while ``echo`` runs: what else happens meanwhile
ON_RUN: list[Any] = []
WAITING = threading.Event()
CANCELLED = threading.Event()


@dataclass
class ToolResult:
    content: str
    truncated: bool = False
    error: bool = False
    label: str = ""


class Echo:
    name = "echo"
    description = "Say the text back."
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    timeout_s = 10.0

    async def run(self, arguments: dict[str, Any], context: Any) -> ToolResult:
        for hook in ON_RUN:
            await asyncio.to_thread(hook)
        return ToolResult(SAID.get("text", arguments["text"]), label="Echoed")


class Wait:
    name = "wait"
    description = "Wait until stopped."
    parameters = {"type": "object", "properties": {}}
    timeout_s = 60.0

    async def run(self, arguments: dict[str, Any], context: Any) -> str:
        WAITING.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            CANCELLED.set()
            raise
        return "never"


def provider(*, user: Any) -> list[Any]:
    """The test tools, for every user."""
    return [Echo(), Wait()]


def reset() -> None:
    SAID.clear()
    ON_RUN.clear()
    WAITING.clear()
    CANCELLED.clear()


class ToolEngine(ScriptedEngine):
    """The scripted engine, calling ``tool`` with ``arguments`` whenever it is offered
    tools and the prompt does not end with ``rounds`` results; otherwise it answers
    its text. Keeps every job it receives."""

    def __init__(
        self,
        *,
        tool: str = "echo",
        arguments: str = '{"text": "hi"}',
        rounds: int = 1,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.tool, self.arguments, self.rounds = tool, arguments, rounds
        self.jobs: list[protocol.Job] = []
        self._ids = itertools.count(1)

    async def generate(self, job: protocol.Job):  # type: ignore[override]
        self.jobs.append(job)
        results = sum(1 for m in job.messages if m.get("role") == "tool")
        if job.params.get("tools") and results < self.rounds:
            call_id = f"call_{next(self._ids)}"
            yield Delta("Let me check.")
            yield ToolCallDelta(0, "", id=call_id, name=self.tool)
            half = len(self.arguments) // 2
            yield ToolCallDelta(0, self.arguments[:half])
            yield ToolCallDelta(0, self.arguments[half:])
            yield Finish(
                protocol.FINISH_TOOL_CALLS,
                Usage(
                    prompt_tokens=self.count_tokens(job.messages), completion_tokens=5
                ),
            )
            return
        async for item in super().generate(job):
            yield item

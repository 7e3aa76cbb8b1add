"""Running one stored tool call of the chat's tool loop
(:mod:`conversations.services.turns.tools`): the offered tool's task under its
wall-clock limit and the user's stop (polled every STOP_POLL_S), its result read into
a :class:`~conversations.tool_steps.ToolOutput` (an unknown tool, bad JSON arguments
or a failing tool: an error output the model reads), and the screening of that output
before it enters the prompt (:func:`safety.documents.tool_results_screen`)."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings

from chatsite.errors import DomainError
from conversations.tool_steps import ToolOutput
from inference import keys
from inference.connections import redis_sync

logger = logging.getLogger(__name__)

SCREENED_NOTE = (
    "[The tool's result was withheld: it goes against the content policy ({category}).]"
)
STOPPED_NOTE = "[Stopped by the user before the tool finished.]"
# how often a running tool checks for the user's stop, in seconds
STOP_POLL_S = 0.05


stop_key = keys.tool_stop_key


@dataclass(frozen=True)
class ToolContext:
    """Who a tool runs for: the user, their conversation and the calling message."""

    user_id: int
    conversation_id: str
    message_id: str


def stopped_by_user(message_id: Any) -> bool:
    return bool(redis_sync().exists(stop_key(message_id)))


def _result_fields(value: Any) -> tuple[str, bool, bool, str]:
    """``(content, truncated, error, label)`` of what a tool's run returned: text, or
    an object with ``content`` (or ``text``) and optionally ``truncated``, ``error``,
    ``label``."""
    if isinstance(value, str):
        return value, False, False, ""
    return (
        str(getattr(value, "content", None) or getattr(value, "text", "") or ""),
        bool(getattr(value, "truncated", False)),
        bool(getattr(value, "error", False)),
        str(getattr(value, "label", "") or ""),
    )


async def _call_run(
    tool: Any, arguments: dict[str, Any], context: ToolContext
) -> tuple[ToolOutput | None, bool]:
    """Run one call; return ``(output without its call id, stopped)``. The tool's
    task is cancelled when the user stops the step or its ``timeout_s`` passes."""
    task = asyncio.ensure_future(tool.run(arguments, context))
    limit = float(getattr(tool, "timeout_s", 0) or settings.CHAT_TOOL_STEP_TTL_S)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not task.done():
        await asyncio.wait({task}, timeout=STOP_POLL_S)
        if task.done():
            break
        stopped = stopped_by_user(context.message_id)  # one Redis read, ~0.1 ms
        if stopped or loop.time() >= deadline:
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - the tool's own end, reported below
                pass
            if stopped:
                return ToolOutput("", STOPPED_NOTE, error=True), True
            return (
                ToolOutput(
                    "", f"The tool ran past its limit of {limit:g} s.", error=True
                ),
                False,
            )
    try:
        content, truncated, error, label = _result_fields(task.result())
    except Exception as exc:  # noqa: BLE001 - a failing tool is a result the model reads
        logger.warning("tool %s failed: %s", getattr(tool, "name", "?"), exc)
        return ToolOutput("", f"The tool failed: {exc}", error=True), False
    return ToolOutput("", content, label=label, truncated=truncated, error=error), False


def call_output(
    call: dict[str, str], offered: dict[str, Any], context: ToolContext
) -> tuple[ToolOutput, bool]:
    """The output of one stored call (an error output for an unknown tool or bad
    arguments), and whether the user stopped it."""
    tool = offered.get(call["name"])
    if tool is None:
        text = f"There is no tool named {call['name']!r} available."
        return ToolOutput(call["id"], text, error=True), False
    try:
        arguments = json.loads(call["arguments"] or "{}")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        text = "The tool's arguments are not a JSON object."
        return ToolOutput(call["id"], text, error=True), False
    # async_to_sync, not asyncio.run: a tool's thread-sensitive sync_to_async steps
    # (its ORM reads) then run in this thread, also when this step runs inside a
    # request's sync_to_async (the settling relay, Celery eager)
    output, stopped = async_to_sync(_call_run)(tool, arguments, context)
    assert output is not None
    return (
        ToolOutput(
            call["id"],
            output.content,
            label=output.label,
            truncated=output.truncated,
            error=output.error,
        ),
        stopped,
    )


def screened(output: ToolOutput) -> ToolOutput:
    """``output``, or a note in its place when screening flags its text."""
    from safety.documents import tool_results_screen

    if not output.content.strip():
        return output
    try:
        flag = tool_results_screen(texts=[output.content])[0]
    except DomainError:  # moderation unavailable, failing closed: nothing unchecked
        flag = "unchecked"
    if flag is None:
        return output
    return ToolOutput(
        output.tool_call_id,
        SCREENED_NOTE.format(category=flag),
        label=output.label,
        error=True,
    )

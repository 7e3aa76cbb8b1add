"""The tool loop's part of the SSE relay: the frames of a turn's tool step while it
runs (``tool_step``, then ``next``, ``step_end`` or ``error``), for
:func:`conversations.sse.relay_events`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.urls import reverse

from chatsite.db import db_brief
from chatsite.errors import DomainError, error_sse
from chatsite.sse import sse_frame
from conversations import tool_selectors
from conversations.events import SSE_NEXT, SSE_STEP_END, SSE_TOOL_STEP
from conversations.models import Message
from conversations.rendering import tool_step_html
from conversations.services.turns import tools
from conversations.tool_steps import ToolStep
from inference import protocol

# how often the relay looks at a running tool step, in seconds
STEP_POLL_S = 0.1


def tool_step_payload(step: ToolStep) -> dict[str, Any]:
    """Return the ``tool_step`` frame's data for one step (schema in
    :mod:`conversations.events`): ``{"message_id"`` (the calling assistant message),
    ``"index"`` (the call's position), ``"state"`` ("running", "done", "error",
    "missing"), ``"html"`` (:func:`conversations.rendering.tool_step_html`, the block
    the thread shows after a reload)``}``. Sync (renders a template)."""
    return {
        "message_id": str(step.message.id),
        "index": step.index,
        "state": step.state,
        "html": tool_step_html(step=step),
    }


def calling_get(message_id: Any) -> Message | None:
    """The answer ``message_id`` if it ended calling tools (its turn goes on)."""
    message = (
        Message.objects.select_related("conversation__user")
        .filter(id=message_id, finish_reason=protocol.FINISH_TOOL_CALLS)
        .first()
    )
    return message if message is not None and message.tool_calls else None


@dataclass
class _StepView:
    """One look at a running tool step: its state, the blocks that changed, the
    next message (when the next generation started)."""

    state: str
    payloads: list[dict[str, Any]]
    next: Message | None = None
    error: str = ""
    code: str = ""


def _step_look(calling: Message, known: dict[Any, Any]) -> _StepView:
    """Read the step of ``calling``: its Redis state, and its results when that
    changed since the last look (``known``: each block's state sent, by index, and
    under None the step's last ``(state, results done)``)."""
    # no state: the step never ran here, or long ago: what the tree holds
    state = tools.step_state(message_id=calling.id)
    name = state["state"] if state else tools.STEP_NEXT
    running = name == tools.STEP_RUNNING
    mark = (name, state.get("done")) if state else None
    if running and mark == known.get(None):
        return _StepView(name, [])  # nothing new: no query
    known[None] = mark
    steps = tool_selectors.tool_steps_get(
        user=calling.conversation.user,
        conversation_id=calling.conversation_id,
        message_id=calling.id,
        running=running,
    )
    payloads = [
        tool_step_payload(step) for step in steps if known.get(step.index) != step.state
    ]
    for p in payloads:
        known[p["index"]] = p["state"]
    view = _StepView(name, payloads)
    if state is None:
        view.next = tool_selectors.chain_next(message=calling)
        if view.next is None:
            view.state = tools.STEP_STOPPED
    elif name == tools.STEP_NEXT:
        view.next = Message.objects.select_related("conversation").get(id=state["next"])
    elif name == tools.STEP_FAILED:
        view.error, view.code = state.get("error", ""), state.get("code", "")
    return view


async def step_events(calling: Message) -> AsyncGenerator[str | Message, None]:
    """The frames of ``calling``'s tool step while it runs; ends with the next message
    (a :class:`Message`, to relay next) or the frame that ends the turn."""
    known: dict[Any, Any] = {}
    last_sent = time.monotonic()
    while True:
        view = await db_brief(_step_look)(calling, known)
        for payload in view.payloads:
            yield sse_frame(SSE_TOOL_STEP, payload)
            last_sent = time.monotonic()
        if view.next is not None:
            yield sse_frame(
                SSE_NEXT,
                {
                    "message_id": str(view.next.id),
                    "stream_url": reverse(
                        "message-stream", args=[view.next.conversation_id, view.next.id]
                    ),
                    "stop_url": reverse(
                        "message-stop", args=[view.next.conversation_id, view.next.id]
                    ),
                },
            )
            yield view.next
            return
        if view.state == tools.STEP_FAILED:
            failed = DomainError(
                view.error or "The next step of this answer could not start.",
                code=view.code or "tool_step_failed",
            )
            yield error_sse(failed, message_id=str(calling.id))
            return
        if view.state in tools.STEP_ENDS:
            yield sse_frame(
                SSE_STEP_END, {"message_id": str(calling.id), "state": view.state}
            )
            return
        if time.monotonic() - last_sent >= settings.SSE_HEARTBEAT_S:
            yield ": ping\n\n"
            last_sent = time.monotonic()
        await asyncio.sleep(STEP_POLL_S)

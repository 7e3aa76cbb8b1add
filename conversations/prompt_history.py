"""The prompt's history: which messages of a branch a prompt may carry (no failed or
streaming answer, no flagged import, a tool round only whole) and their OpenAI form,
with the rolling summary when it lies on the branch. The page's thread is
:mod:`conversations.selectors`.
"""

from __future__ import annotations

from typing import Any

from conversations.models import Conversation, Message
from conversations.selectors import message_tree
from conversations.tool_steps import openai_tool_calls


def _usable(m: Message) -> bool:
    """An assistant message the model may see: it did not fail and is not streaming."""
    return m.status not in (Message.Status.STREAMING, Message.Status.ERROR)


def _promptable(messages: list[Message], *, asked: Any = None) -> list[Message]:
    """Keep what a prompt may hold of the branch ``messages``, in order.

    User messages and answers with text that did not fail or still stream (the model
    should not see an empty or failed reply); a round of tool calls only whole: the
    calling message with exactly one result per call right after it (never a call
    without its result nor a result without its call: a round the loop did not finish
    is left out). Messages flagged by moderation at import (``moderation_category``)
    are left out, and with them their whole round, except ``asked``, the id of the
    question a turn answers (admission screens it under the policies in force).
    """
    kept: list[Message] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        i += 1
        flagged = bool(m.moderation_category) and m.id != asked
        if m.role == Message.Role.USER:
            if not flagged:
                kept.append(m)
        elif m.role == Message.Role.ASSISTANT and m.tool_calls:
            results: list[Message] = []
            while i < len(messages) and messages[i].role == Message.Role.TOOL:
                results.append(messages[i])
                i += 1
            whole = sorted(r.tool_call_id for r in results) == sorted(
                c["id"] for c in m.tool_calls
            )
            if (
                whole
                and not flagged
                and _usable(m)
                and not any(r.moderation_category for r in results)
            ):
                kept += [m, *results]
        elif m.role == Message.Role.ASSISTANT:
            if not flagged and _usable(m) and m.content:
                kept.append(m)
        # system messages, and tool results not right after their call: left out
    return kept


def prompt_message(m: Message) -> dict[str, Any]:
    """Return a stored message as an OpenAI chat message: ``{"role", "content"}``;
    an assistant's calls as ``tool_calls`` (:func:`conversations.tool_steps.
    openai_tool_calls`, arguments exactly as generated); a tool result as ``{"role":
    "tool", "tool_call_id", "name", "content"}`` (raw: :func:`memory.context.
    context_build` quotes it as data and drops ``name`` before the engine sees it)."""
    if m.role == Message.Role.TOOL:
        return {
            "role": "tool",
            "tool_call_id": m.tool_call_id,
            "name": m.tool_name,
            "content": m.content,
        }
    if m.role == Message.Role.ASSISTANT and m.tool_calls:
        return {
            "role": "assistant",
            "content": m.content,
            "tool_calls": openai_tool_calls(m.tool_calls),
        }
    return {"role": m.role, "content": m.content}


def context_messages(
    *, conversation: Conversation, upto: Message | None = None
) -> list[Message]:
    """Return the messages a prompt may hold, oldest first: the path from the root to
    ``upto`` (inclusive), or the current branch when ``upto`` is None.

    Answers that ended in an error or are still streaming are left out; rounds of tool
    calls are kept only whole (see :func:`_promptable`).
    """
    tree = message_tree(conversation=conversation)
    if upto is None:
        return _promptable(tree.current_path(conversation))
    return _promptable(tree.path_to(upto.id))


def history_and_summary(
    *, conversation: Conversation, upto: Message | None
) -> tuple[list[dict[str, Any]], str, int]:
    """Return ``(history, summary, covers)`` for a prompt that continues after ``upto``.

    ``history`` is the path from the root to ``upto`` (inclusive; empty when None)
    as OpenAI chat messages (:func:`prompt_message`), failed and streaming answers
    left out, rounds of tool calls kept only whole. ``upto`` may be the last tool
    result of a turn's chain: the history then ends with the question and the
    chain so far, for the turn's next step. ``summary`` is the
    conversation's rolling summary, used only when its ``summary_upto`` lies on that
    path (it summarises a linear prefix; another branch's summary would leak that
    branch), and ``covers`` how many leading history messages it summarises (0
    without a summary).
    """
    path = message_tree(conversation=conversation).path_to(upto.id) if upto else []
    # a regenerate answers ``upto`` itself, the next step of a tool chain the question
    # above it: a question flagged at import is kept for admission to screen; a new
    # message follows ``upto`` (an answer), never kept so
    asked = None
    if upto is not None and upto.role in (Message.Role.USER, Message.Role.TOOL):
        users = [m.id for m in path if m.role == Message.Role.USER]
        asked = users[-1] if users else None
    messages = _promptable(path, asked=asked)
    upto_id = conversation.summary_upto_id
    on_path = [m.created_at for m in path if m.id == upto_id]
    covers = 0
    summary = ""
    if on_path:
        summary = conversation.summary
        covers = sum(1 for m in messages if m.created_at <= on_path[0])
    history = [prompt_message(m) for m in messages]
    return history, summary, covers

"""Reads of a conversation's tool chains: the steps of an answer's calls for the
page's live blocks, the answer that continues a chain, and the question a chain's
answer answers (the thread itself is :mod:`conversations.selectors`).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from conversations.models import Message
from conversations.selectors import message_get, message_tree
from conversations.tool_steps import ToolStep


def tool_steps_get(
    *, user: User, conversation_id: Any, message_id: Any, running: bool = False
) -> list[ToolStep]:
    """Return the steps of the assistant message ``message_id``'s tool calls, in call
    order, each with the result stored for it (None while it has none; ``running``
    marks those as still running). For the page's live blocks
    (:func:`conversations.rendering.tool_step_html`). Two queries. Raises NotFound
    (not the user's conversation or message); an answer without calls has no steps.
    """
    message = message_get(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    if message.role != Message.Role.ASSISTANT or not message.tool_calls:
        return []
    ids = [c["id"] for c in message.tool_calls]
    rows = Message.objects.filter(
        conversation_id=message.conversation_id,
        role=Message.Role.TOOL,
        tool_call_id__in=ids,
    )
    # only the results of this message's own chain (another chain may reuse an id)
    chain: dict[str, Message] = {}
    node: Any = message.id
    by_parent = {r.parent_id: r for r in rows}
    while node in by_parent and len(chain) < len(ids):
        r = by_parent[node]
        chain[r.tool_call_id] = r
        node = r.id
    return [
        ToolStep(message=message, index=k, result=chain.get(i), running=running)
        for k, i in enumerate(ids)
    ]


def chain_next(*, message: Message) -> Message | None:
    """Return the answer that continues the tool chain of ``message`` (an assistant
    message that called tools): the newest assistant child of its last result, or
    None (no result yet, or the turn ended there). Two queries."""
    ids = [c["id"] for c in message.tool_calls or []]
    if not ids:
        return None
    by_parent = {
        r.parent_id: r.id
        for r in Message.objects.filter(
            conversation_id=message.conversation_id,
            role=Message.Role.TOOL,
            tool_call_id__in=ids,
        )
    }
    node = message.id
    while node in by_parent:
        node = by_parent[node]
    if node == message.id:
        return None
    return (
        Message.objects.select_related("conversation")
        .filter(parent_id=node, role=Message.Role.ASSISTANT)
        .order_by("-created_at")
        .first()
    )


def answer_question(*, answer: Message) -> Message | None:
    """Return the user message ``answer`` answers: its parent, or for the last answer
    of a tool chain the user message above the chain (None if there is none). One
    query, two for a chain."""
    if answer.parent_id is None:
        return None
    parent = Message.objects.filter(id=answer.parent_id).first()
    if parent is None or parent.role == Message.Role.USER:
        return parent
    path = message_tree(conversation=answer.conversation).path_to(answer.id)
    users = [m for m in path if m.role == Message.Role.USER]
    return users[-1] if users else None

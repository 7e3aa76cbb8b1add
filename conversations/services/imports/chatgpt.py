"""Read a ChatGPT data export's ``conversations.json``.

The file is a list of conversations, each with ``title``, ``create_time`` (Unix time,
seconds), ``mapping`` (node id -> ``{id, parent, children, message}``) and
``current_node`` (the leaf of the branch the user last saw). A message has
``author.role``, ``create_time``, ``content`` (``content_type``, ``parts``) and
``metadata`` (``model_slug``, ``finish_details.type``).

Kept: the text parts of user and assistant messages (``text``, and the string
parts of ``multimodal_text``; a message without ``content_type`` is ``text``), with
their original times and the tree. Skipped: system and tool messages, non-text content (code run, images,
browsing), assistant messages addressed to a tool (``recipient`` not ``all``), hidden
and empty messages; the children of a skipped node hang from its nearest kept
ancestor. An assistant message whose kept parent is an assistant message that has
no other kept child is the same answer split around a tool call: it is appended to
that message.

Refused (InvalidInput naming the conversation, node and field, so nothing is
stored): an empty ``mapping``; nodes whose ``parent`` links form a loop (they never
reach a root); a part of a text message that is not a string (in ``multimodal_text``,
a JSON object is a non-text part such as an image, and is skipped); a conversation
with no user or assistant text left to import, which would open as a blank page.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from conversations.models import Message
from conversations.services.imports.records import (
    ImportedConversation,
    ImportedMessage,
    fail,
    text_field,
    time_field,
    title_clean,
)

_ROLES = {"user": Message.Role.USER, "assistant": Message.Role.ASSISTANT}
# content types whose string parts are text (multimodal_text mixes in image parts)
_TEXT_TYPES = ("text", "multimodal_text")
# ChatGPT's finish_details.type -> (our finish_reason, status)
_FINISH = {
    "stop": ("stop", Message.Status.COMPLETE),
    "max_tokens": ("length", Message.Status.COMPLETE),
    "interrupted": ("cancelled", Message.Status.CANCELLED),
}


def _time(value: Any, where: str, name: str) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(where, f"`{name}` must be a Unix time (seconds) or null.")
    try:
        if not math.isfinite(value):
            raise ValueError
        parsed = dt.datetime.fromtimestamp(value, tz=dt.UTC)
    except (ValueError, OverflowError, OSError):
        raise fail(where, f"`{name}` is not a valid time.") from None
    return time_field(parsed, where, name)


def _dict(value: Any, where: str, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(where, f"`{name}` must be a JSON object.")
    return value


def _kept_text(message: dict[str, Any], where: str) -> tuple[str, str] | None:
    """Return ``(role, text)`` of a message to keep, or None for one to skip."""
    author = _dict(message.get("author"), where, "author")
    name = author.get("role")
    role = _ROLES.get(name) if isinstance(name, str) else None
    content = _dict(message.get("content"), where, "content")
    content_type = content.get("content_type", "text")
    metadata = message.get("metadata") or {}
    if (
        role is None
        or content_type not in _TEXT_TYPES
        or message.get("recipient", "all") != "all"
        or (
            isinstance(metadata, dict)
            and metadata.get("is_visually_hidden_from_conversation")
        )
    ):
        return None
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise fail(where, "`content.parts` must be a list.")
    for i, part in enumerate(parts):
        if isinstance(part, str):
            continue
        if content_type == "multimodal_text":
            if not isinstance(part, dict):
                raise fail(
                    where, f"`content.parts[{i}]` must be a string or a JSON object."
                )
        else:
            raise fail(where, f"`content.parts[{i}]` must be a string.")
    text = "\n".join(p for p in parts if isinstance(p, str))
    text = text_field(text, where, "content")
    return (role, text) if text.strip() else None


def _message(
    node_id: str, message: dict[str, Any], role: str, text: str, where: str
) -> dict[str, Any]:
    metadata = message.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    model = metadata.get("model_slug")
    finish = metadata.get("finish_details")
    kind = finish.get("type") if isinstance(finish, dict) else None
    if not isinstance(kind, str):
        kind = ""
    finish_reason, status = _FINISH.get(kind, ("", Message.Status.COMPLETE))
    return {
        "key": node_id,
        "role": role,
        "content": text,
        "created_at": _time(message.get("create_time"), where, "create_time"),
        "model": model[:200] if isinstance(model, str) and role == "assistant" else "",
        "finish_reason": finish_reason if role == "assistant" else "",
        "status": status if role == "assistant" else Message.Status.COMPLETE,
    }


def _conversation(raw: Any, where: str) -> ImportedConversation:
    c = _dict(raw, where, "conversation")
    title = title_clean(c.get("title"), where)
    where = f"{where} (“{title[:40]}”)"
    started = _time(c.get("create_time"), where, "create_time")
    mapping = _dict(c.get("mapping"), where, "mapping")
    if not mapping:
        raise fail(where, "`mapping` is empty: the conversation has no messages.")
    for node_id, node in mapping.items():
        node = _dict(node, f"{where}, node {node_id[:40]}", "node")
        parent = node.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise fail(f"{where}, node {node_id[:40]}", "`parent` must be a string.")
        message = node.get("message")
        if message is not None:
            _dict(message, f"{where}, node {node_id[:40]}", "message")
    children: dict[str | None, list[str]] = {}
    for node_id, node in mapping.items():
        parent = node.get("parent")
        children.setdefault(parent if parent in mapping else None, []).append(node_id)
    # Walk from the roots, parents before children; a node on a parent loop (or
    # below one) is never reached.
    kept: list[dict[str, Any]] = []
    by_key: dict[str, dict[str, Any]] = {}
    kept_ancestor: dict[str, str | None] = {}
    kept_children: dict[str | None, int] = {}
    stack: list[tuple[str, str | None]] = [
        (root, None) for root in reversed(children.get(None, []))
    ]
    while stack:
        node_id, ancestor = stack.pop()
        node = mapping[node_id]
        message = node.get("message")
        here = ancestor
        place = f"{where}, node {node_id[:40]}"
        found = _kept_text(message, place) if message is not None else None
        if found is not None:
            item = _message(node_id, message, *found, place)
            parent = by_key.get(ancestor) if ancestor else None
            item["parent_key"] = ancestor
            item["created_at"] = item["created_at"] or (
                parent["created_at"] if parent else started
            )
            kept.append(item)
            by_key[node_id] = item
            kept_children[ancestor] = kept_children.get(ancestor, 0) + 1
            here = node_id
        kept_ancestor[node_id] = here
        stack += [(child, here) for child in reversed(children.get(node_id, []))]
    unreached = [node_id for node_id in mapping if node_id not in kept_ancestor]
    if unreached:
        names = ", ".join(repr(n[:40]) for n in unreached[:3])
        raise fail(
            where,
            f"the `parent` links of node{'s' if len(unreached) > 1 else ''} {names}"
            f"{' and others' if len(unreached) > 3 else ''} form a loop.",
        )
    if not kept:
        raise fail(where, "there is no user or assistant text message to import.")
    messages, merged_into = _merge_split_answers(kept, kept_children)
    fallback = started or (
        messages[0]["created_at"] if messages else dt.datetime.now(tz=dt.UTC)
    )
    for m in messages:
        m["created_at"] = m["created_at"] or fallback
    times = [m["created_at"] for m in messages]
    current = c.get("current_node")
    leaf = kept_ancestor.get(current) if isinstance(current, str) else None
    return ImportedConversation(
        title=title,
        created_at=started or (min(times) if times else fallback),
        updated_at=_time(c.get("update_time"), where, "update_time")
        or (max(times) if times else fallback),
        messages=[ImportedMessage(**m) for m in messages],
        current_leaf_key=merged_into.get(leaf, leaf) if leaf else None,
    )


def _merge_split_answers(
    kept: list[dict[str, Any]], kept_children: dict[str | None, int]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Append an assistant message to its assistant parent when it is that parent's
    only kept child (see the module docstring); re-point its children. Return the
    messages left and ``{merged key: key of the message it went into}``."""
    merged_into: dict[str, str] = {}
    by_key = {m["key"]: m for m in kept}
    out = []
    for m in kept:
        original = m["parent_key"]
        m["parent_key"] = merged_into.get(original, original)
        parent = by_key.get(m["parent_key"]) if m["parent_key"] else None
        if (
            parent is not None
            and parent["role"] == m["role"] == Message.Role.ASSISTANT
            and kept_children.get(original, 0) == 1
        ):
            parent["content"] += "\n\n" + m["content"]
            parent["finish_reason"] = m["finish_reason"] or parent["finish_reason"]
            parent["status"] = m["status"]
            merged_into[m["key"]] = parent["key"]
            continue
        out.append(m)
    return out, merged_into


def chatgpt_parse(data: Any) -> list[ImportedConversation]:
    """Return the conversations of a ChatGPT ``conversations.json`` (a list, or one
    conversation object); raise InvalidInput naming the place of a wrong shape or type."""
    items = data if isinstance(data, list) else [data]
    return [_conversation(raw, f"Conversation {i}") for i, raw in enumerate(items, 1)]

"""Read our own export (conversations.exports, ``format`` EXPORT_FORMAT)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings

from conversations.exports import EXPORT_FORMAT, EXPORT_VERSION
from conversations.models import Feedback, Message
from conversations.services.imports.records import (
    ImportedConversation,
    ImportedMessage,
    count_field,
    fail,
    text_field,
    time_field,
    title_clean,
)
from conversations.tool_steps import (
    CALL_ID_MAX_CHARS,
    NAME_MAX_CHARS,
    ToolStepProblem,
    calls_clean,
    detail_clean,
)

# A message still streaming when it was exported has stopped for good in the copy.
_STATUS_ON_IMPORT: dict[str, str] = {Message.Status.STREAMING: Message.Status.CANCELLED}
_SHORT = 200  # characters of model, pool, finish reason and other short fields


def _json_kind(value: Any) -> str:
    """What a JSON value is, in the words of an error message ("null", "a number")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    return "a list" if isinstance(value, list) else "a JSON object"


def timestamp_field(item: dict[str, Any], where: str, name: str) -> dt.datetime:
    """Return the ISO 8601 time ``item[name]`` (UTC when it names no zone); raise
    InvalidInput saying whether the field is missing, null or not such a time."""
    if name not in item:
        raise fail(where, f"`{name}` is missing: it must be an ISO 8601 time string.")
    value = item[name]
    if not isinstance(value, str):
        raise fail(
            where, f"`{name}` must be an ISO 8601 time string, not {_json_kind(value)}."
        )
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise fail(
            where, f"`{name}` is not an ISO 8601 time: {value[:40]!r}."
        ) from None
    return time_field(parsed, where, name)


def _choice(value: Any, where: str, name: str, choices: list[str]) -> str:
    if value not in choices:
        raise fail(where, f"`{name}` must be one of {', '.join(choices)}.")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(where, "must be a JSON object.")
    return value


def _feedback(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    value = _object(value, f"{where}, feedback")
    where = f"{where}, feedback"
    return {
        "rating": _choice(value.get("rating"), where, "rating", Feedback.Rating.values),
        "reason": _choice(
            value.get("reason", ""), where, "reason", ["", *Feedback.Reason.values]
        ),
        "comment": text_field(value.get("comment", ""), where, "comment"),
        "model": text_field(value.get("model", ""), where, "model", limit=_SHORT),
        "pool": text_field(value.get("pool", ""), where, "pool", limit=100),
        "created_at": timestamp_field(value, where, "created_at"),
        "updated_at": timestamp_field(value, where, "updated_at"),
    }


def _citations(value: Any, where: str) -> list[tuple[int, int]]:
    if not isinstance(value, list):
        raise fail(where, "`citations` must be a list.")
    out = []
    for c in value:
        c = _object(c, f"{where}, citation")
        number = count_field(c.get("number"), where, "citation number")
        chunk = count_field(c.get("chunk_id"), where, "citation chunk_id")
        if number is not None and chunk is not None:
            out.append((number, chunk))
    return out


def _tool_fields(m: dict[str, Any], role: str, where: str) -> dict[str, Any]:
    """Return a message's tool fields (conversations.tool_steps shapes): calls only on
    an assistant message, a call id, name and detail only (and always) on a tool
    result; raise InvalidInput naming the problem otherwise."""
    calls = m.get("tool_calls") or []
    call_id = m.get("tool_call_id") or ""
    name = m.get("tool_name") or ""
    detail = m.get("tool_detail") or {}
    try:
        if role == Message.Role.TOOL:
            if calls:
                raise ToolStepProblem("a tool result cannot carry `tool_calls`.")
            if not call_id or not name:
                raise ToolStepProblem(
                    "a tool result needs `tool_call_id` and `tool_name`."
                )
            return {
                "tool_call_id": text_field(
                    call_id, where, "tool_call_id", limit=CALL_ID_MAX_CHARS
                ),
                "tool_name": text_field(name, where, "tool_name", limit=NAME_MAX_CHARS),
                "tool_detail": detail_clean(detail),
            }
        if call_id or name or detail:
            raise ToolStepProblem(
                "`tool_call_id`, `tool_name` and `tool_detail` belong on tool results "
                "only."
            )
        if not calls:
            return {}
        if role != Message.Role.ASSISTANT:
            raise ToolStepProblem("only an assistant message can carry `tool_calls`.")
        return {
            "tool_calls": calls_clean(
                calls, arguments_max_chars=settings.CHAT_IMPORT_MAX_MESSAGE_CHARS
            )
        }
    except ToolStepProblem as exc:
        raise fail(where, str(exc)[0].upper() + str(exc)[1:]) from None


def _message(value: Any, where: str) -> ImportedMessage:
    m = _object(value, where)
    key = text_field(m.get("id"), where, "id", limit=_SHORT)
    parent = m.get("parent_id")
    status = _choice(
        m.get("status", "complete"), where, "status", Message.Status.values
    )
    role = _choice(m.get("role"), where, "role", Message.Role.values)
    return ImportedMessage(
        key=key,
        parent_key=None
        if parent is None
        else text_field(parent, where, "parent_id", limit=_SHORT),
        role=role,
        content=text_field(m.get("content"), where, "content"),
        created_at=timestamp_field(m, where, "created_at"),
        status=_STATUS_ON_IMPORT.get(status, status),
        model=text_field(m.get("model", ""), where, "model", limit=_SHORT),
        pool=text_field(m.get("pool", ""), where, "pool", limit=100),
        finish_reason=text_field(
            m.get("finish_reason", ""), where, "finish_reason", limit=32
        ),
        error=text_field(m.get("error", ""), where, "error"),
        token_count=count_field(m.get("token_count"), where, "token_count"),
        prompt_tokens=count_field(m.get("prompt_tokens"), where, "prompt_tokens"),
        cached_tokens=count_field(m.get("cached_tokens"), where, "cached_tokens"),
        ttft_ms=count_field(m.get("ttft_ms"), where, "ttft_ms"),
        latency_ms=count_field(m.get("latency_ms"), where, "latency_ms"),
        cache_kind=_choice(
            m.get("cache_kind", ""), where, "cache_kind", Message.CacheKind.values
        ),
        citations=_citations(m.get("citations", []), where),
        feedback=_feedback(m.get("feedback"), where),
        **_tool_fields(m, role, where),
    )


def native_parse(data: dict[str, Any]) -> list[ImportedConversation]:
    """Return the conversations of our export document; raise InvalidInput (naming
    the place) on a wrong version, shape or type."""
    if data.get("version") != EXPORT_VERSION:
        raise fail(
            "The file",
            f"is a {EXPORT_FORMAT} export of version {data.get('version')!r}; "
            f"this site reads version {EXPORT_VERSION}.",
        )
    items = data.get("conversations")
    if not isinstance(items, list):
        raise fail("The file", "`conversations` must be a list.")
    out = []
    for i, raw in enumerate(items, 1):
        where = f"Conversation {i}"
        c = _object(raw, where)
        raw_messages = c.get("messages")
        if not isinstance(raw_messages, list):
            raise fail(where, "`messages` must be a list.")
        messages = [
            _message(m, f"{where}, message {j}") for j, m in enumerate(raw_messages, 1)
        ]
        leaf = c.get("current_leaf_id")
        out.append(
            ImportedConversation(
                title=title_clean(c.get("title"), where),
                created_at=timestamp_field(c, where, "created_at"),
                updated_at=timestamp_field(c, where, "updated_at"),
                messages=messages,
                current_leaf_key=leaf if isinstance(leaf, str) else None,
            )
        )
    return out

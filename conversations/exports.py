"""Export of the user's conversations as JSON (complete, importable) or Markdown
(a readable transcript): reads, scoped to the owner (CONVENTIONS §1).

JSON (``format`` EXPORT_FORMAT, ``version`` EXPORT_VERSION) carries every message of
every branch (regenerated answers included) with its parent id, role, content,
status, model, ISO 8601 timestamps, finish reason, token counts (tokens), TTFT and
latency (ms), citations and the owner's feedback, and tool steps: an assistant
message's ``tool_calls`` (``[{"id", "name", "arguments"}]``, arguments as generated),
a ``tool`` message's ``tool_call_id``, ``tool_name`` and ``tool_detail`` (``{"label",
"truncated", "error"}``); ``conversations.services.imports`` reads it back. Markdown
shows the displayed thread (:func:`selectors.thread_items`), each tool step as its
label with the call's arguments and the result in code blocks.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from chatsite.errors import InvalidInput
from conversations import selectors
from conversations.models import Conversation, Feedback, Message
from memory.models import Citation

EXPORT_FORMAT = "chatsite-conversations"
EXPORT_VERSION = 1
EXPORT_KINDS = ("json", "md")


def export_kind_clean(kind: Any) -> str:
    """Return ``"json"`` or ``"md"`` (default json); raise InvalidInput otherwise."""
    kind = kind or "json"
    if kind not in EXPORT_KINDS:
        raise InvalidInput(
            "Choose an export format: `json` or `md`.", code="invalid_format"
        )
    return kind


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _message_json(
    m: Message, citations: list[Citation], feedback: Feedback | None
) -> dict[str, Any]:
    return {
        "id": str(m.id),
        "parent_id": str(m.parent_id) if m.parent_id else None,
        "role": m.role,
        "content": m.content,
        "status": m.status,
        "model": m.model,
        "pool": m.pool,
        "created_at": _iso(m.created_at),
        "finish_reason": m.finish_reason,
        "error": m.error,
        "token_count": m.token_count,
        "prompt_tokens": m.prompt_tokens,
        "cached_tokens": m.cached_tokens,
        "ttft_ms": m.ttft_ms,
        "latency_ms": m.latency_ms,
        "cache_kind": m.cache_kind,
        "tool_calls": m.tool_calls,
        "tool_call_id": m.tool_call_id,
        "tool_name": m.tool_name,
        "tool_detail": m.tool_detail,
        "citations": [
            {
                "number": c.number,
                "chunk_id": c.chunk_id,
                "document_id": c.chunk.document_id,
                "document_title": c.chunk.document.title,
                "passage": c.chunk.ord + 1,
            }
            for c in citations
        ],
        "feedback": None
        if feedback is None
        else {
            "rating": feedback.rating,
            "reason": feedback.reason,
            "comment": feedback.comment,
            "model": feedback.model,
            "pool": feedback.pool,
            "created_at": _iso(feedback.created_at),
            "updated_at": _iso(feedback.updated_at),
        },
    }


def conversations_export_json(
    *, user: User, conversation_id: Any = None
) -> dict[str, Any]:
    """Return the export document of one conversation of the user (NotFound if not
    theirs) or, with ``conversation_id`` None, of all their conversations (newest
    first). Four queries whatever the number of messages."""
    if conversation_id is not None:
        conversations = [
            selectors.conversation_get(user=user, conversation_id=conversation_id)
        ]
    else:
        conversations = list(
            Conversation.objects.filter(user=user).order_by("-updated_at", "id")
        )
    ids = [c.id for c in conversations]
    messages: dict[Any, list[Message]] = defaultdict(list)
    for m in Message.objects.filter(conversation_id__in=ids).order_by(
        "created_at", "id"
    ):
        messages[m.conversation_id].append(m)
    citations: dict[Any, list[Citation]] = defaultdict(list)
    for c in (
        Citation.objects.filter(message__conversation_id__in=ids)
        .select_related("chunk__document")
        .order_by("number")
    ):
        citations[c.message_id].append(c)
    feedback = {
        f.message_id: f
        for f in Feedback.objects.filter(user=user, message__conversation_id__in=ids)
    }
    out = []
    for conv in conversations:
        item: dict[str, Any] = {
            "id": str(conv.id),
            "title": conv.title,
            "created_at": _iso(conv.created_at),
            "updated_at": _iso(conv.updated_at),
        }
        leaf_id = conv.current_leaf_id
        item["current_leaf_id"] = str(leaf_id) if leaf_id else None
        item["messages"] = [
            _message_json(m, citations.get(m.id, []), feedback.get(m.id))
            for m in messages.get(conv.id, [])
        ]
        out.append(item)
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "exported_at": _iso(timezone.now()),
        "conversations": out,
    }


def _fenced(text: str, lang: str = "") -> list[str]:
    """Return ``text`` as a Markdown code block whose fence is longer than any run of
    backticks inside it (so the text cannot close it)."""
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return [fence + lang, text, fence]


def _steps_markdown(rounds: list[selectors.ToolRound], shown: Message) -> list[str]:
    """Return the lines of an answer's tool steps: per step its label, then the
    call's arguments and the result in code blocks, all as a quote."""
    lines: list[str] = []
    for r in rounds:
        if r.message.content.strip() and r.message.id != shown.id:
            lines += ["", r.message.content.strip()]
        for step in r.steps:
            state = {"error": " (failed)", "missing": " (no result)"}.get(
                step.state, ""
            )
            body = [f"**{step.label}**{state} · `{step.call['name']}`", ""]
            body += ["Arguments:", *_fenced(step.call["arguments"], "json")]
            if step.result is not None:
                cut = " (cut short)" if step.detail["truncated"] else ""
                body += ["", f"Result{cut}:", *_fenced(step.result.content)]
            quoted = [line for entry in body for line in entry.split("\n")]
            lines += ["", *("> " + line if line else ">" for line in quoted)]
    return lines


def _when(value: dt.datetime) -> str:
    return timezone.localtime(value, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _conversation_markdown(conversation: Conversation) -> str:
    lines = [
        f"# {conversation.title}",
        "",
        f"Started {_when(conversation.created_at)} · "
        f"last active {_when(conversation.updated_at)}",
    ]
    for item in selectors.thread_items(conversation=conversation):
        m = item.message
        who = "You" if m.role == Message.Role.USER else m.role.capitalize()
        head = f"### {who} · {_when(m.created_at)}"
        if m.model:
            head += f" · {m.model}"
        if m.status not in (Message.Status.COMPLETE, Message.Status.STREAMING):
            head += f" · {m.get_status_display()}"
        lines += ["", head]
        lines += _steps_markdown(item.rounds, m)
        if m.content.strip() or not item.rounds:
            lines += ["", m.content.strip() or "*(no text)*"]
    return "\n".join(lines) + "\n"


def conversations_export_markdown(*, user: User, conversation_id: Any = None) -> str:
    """Return one conversation (NotFound if not the user's) or all of the user's,
    newest first, as Markdown: a heading per conversation, then the displayed thread
    (one answer per question: the shown version), each message under a heading with
    its author, UTC time and model."""
    if conversation_id is not None:
        conversations = [
            selectors.conversation_get(user=user, conversation_id=conversation_id)
        ]
    else:
        conversations = list(
            Conversation.objects.filter(user=user).order_by("-updated_at", "id")
        )
    return "\n---\n\n".join(_conversation_markdown(c) for c in conversations)


def export_filename(*, title: str | None, kind: str) -> str:
    """Return an attachment file name: ``chat-<title slug>-<UTC date>.<kind>``
    (``chats-…`` for a whole-account export, ``title`` None)."""
    date = timezone.now().astimezone(dt.UTC).strftime("%Y-%m-%d")
    if title is None:
        return f"chats-{date}.{kind}"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-").lower()[:40] or "chat"
    return f"chat-{slug}-{date}.{kind}"

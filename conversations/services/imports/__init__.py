"""Import conversations from a file: our own JSON export (a round trip keeps every
message, parent, timestamp and order) or a ChatGPT ``conversations.json``.

All or nothing: the file is read and checked whole before one transaction stores it.
Imported conversations belong to the importer; their messages get new ids, are final
(never ``streaming``: nothing is generated or re-generated) and are not billed (no
usage record). Limits: CHAT_IMPORT_MAX_BYTES, CHAT_IMPORT_MAX_CONVERSATIONS,
CHAT_IMPORT_MAX_MESSAGES, CHAT_IMPORT_MAX_MESSAGE_CHARS.

Screened like a typed message (:func:`safety.screening.history_screen`): a message the
content policy would block is imported but marked (``Message.moderation_category``)
and never sent in a prompt; the result says how many. Tool steps are screened the
same way: a tool result's text, and each call's arguments (marking the calling
message); a marked step leaves the prompt with its whole round.

Tool steps must be whole in the file's tree: a ``tool`` message's nearest message
above its chain of results is the assistant message whose ``tool_calls`` has its
``tool_call_id``, with at most one result per call.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from chatsite.errors import InvalidInput, PayloadTooLarge
from chatsite.jsonbody import json_loads_bounded
from chatsite.storable import value_check
from conversations.exports import EXPORT_FORMAT
from conversations.models import Conversation, Feedback, Message
from conversations.services.imports.chatgpt import chatgpt_parse
from conversations.services.imports.native import native_parse
from conversations.services.imports.records import (
    ImportedConversation,
    ImportedMessage,
    conversations_count_check,
    fail,
    limits_check,
    title_of_copy,
)
from memory.models import Chunk, Citation
from safety.screening import history_screen

__all__ = ["ImportResult", "conversations_import", "import_file_parse"]


@dataclass(frozen=True)
class ImportResult:
    """What an import stored: the conversations in the file's order, and how many
    messages moderation flagged (kept, marked, left out of prompts)."""

    conversations: list[Conversation]
    flagged: int = 0

    def notice(self) -> str:
        """The sentence that tells the importer about flagged messages ("" if none)."""
        if not self.flagged:
            return ""
        return (
            f"{self.flagged} message{'s' if self.flagged != 1 else ''} went against "
            "the content policy: kept and marked, but never sent to the assistant."
        )


def import_file_parse(*, data: bytes) -> list[ImportedConversation]:
    """Return the conversations of an import file's bytes, checked; store nothing.

    Raises PayloadTooLarge over CHAT_IMPORT_MAX_BYTES bytes; InvalidInput when the
    file is not UTF-8 JSON, is neither of the two formats, has a wrong shape or type
    (the message says where), breaks a count limit, or a message's parent is missing
    from its conversation or the parents form a loop.
    """
    limit = settings.CHAT_IMPORT_MAX_BYTES
    if len(data) > limit:
        raise PayloadTooLarge(
            f"The file is larger than {limit // (1024 * 1024)} MB. Nothing was imported.",
            code="import_too_large",
        )
    try:
        document = json_loads_bounded(
            data, max_depth=settings.JSON_MAX_DEPTH, message="This file"
        )
    except InvalidInput as exc:
        if exc.code == "json_too_deep":
            raise InvalidInput(
                f"{exc.message} Nothing was imported.", code="invalid_import"
            ) from None
        raise InvalidInput(
            "This file is not JSON. Choose a JSON file exported from this site, or "
            "conversations.json from a ChatGPT data export. Nothing was imported.",
            code="invalid_import",
        ) from None
    if isinstance(document, dict) and document.get("format") == EXPORT_FORMAT:
        conversations = native_parse(document)
    elif isinstance(document, list) or (
        isinstance(document, dict) and "mapping" in document
    ):
        if isinstance(document, list):
            conversations_count_check(len(document))
        conversations = chatgpt_parse(document)
    else:
        raise InvalidInput(
            "This JSON file is neither an export of this site nor a ChatGPT "
            "conversations.json. Nothing was imported.",
            code="invalid_import",
        )
    limits_check(conversations)
    for i, conversation in enumerate(conversations, 1):
        _tree_check(conversation, f"Conversation {i}")
        _tool_chain_check(conversation, f"Conversation {i}")
        # every field the readers did not check by name (model, pool, ids...)
        value_check(dataclasses.asdict(conversation), where=f"Conversation {i}")
    return conversations


def _tree_check(conversation: ImportedConversation, where: str) -> None:
    """Raise InvalidInput on a duplicate id, a parent outside the conversation, or
    a loop of parents."""
    parents: dict[str, str | None] = {}
    for m in conversation.messages:
        if m.key in parents:
            raise fail(where, f"the message id {m.key[:40]!r} appears twice.")
        parents[m.key] = m.parent_key
    for key, parent in parents.items():
        if parent is not None and parent not in parents:
            raise fail(
                where, f"message {key[:40]!r} answers a message not in the file."
            )
    settled: set[str] = set()
    for key in parents:
        path: set[str] = set()
        node: str | None = key
        while node is not None and node not in settled:
            if node in path:
                raise fail(where, "the messages' parents form a loop.")
            path.add(node)
            node = parents[node]
        settled |= path


def _tool_chain_check(conversation: ImportedConversation, where: str) -> None:
    """Raise InvalidInput when a tool result does not answer a call of the assistant
    message above its chain, or a call has two results (call after _tree_check)."""
    by_key = {m.key: m for m in conversation.messages}
    for m in conversation.messages:
        if m.role != Message.Role.TOOL:
            continue
        node = by_key.get(m.parent_key) if m.parent_key else None
        answered = {m.tool_call_id}
        while node is not None and node.role == Message.Role.TOOL:
            if node.tool_call_id in answered:
                raise fail(
                    where,
                    f"the tool call {node.tool_call_id[:40]!r} has two results.",
                )
            answered.add(node.tool_call_id)
            node = by_key.get(node.parent_key) if node.parent_key else None
        if node is None or node.role != Message.Role.ASSISTANT:
            raise fail(
                where,
                f"tool result {m.key[:40]!r} does not follow the assistant message "
                "that called the tool.",
            )
        if m.tool_call_id not in {c["id"] for c in node.tool_calls}:
            raise fail(
                where,
                f"tool result {m.key[:40]!r} answers the call "
                f"{m.tool_call_id[:40]!r}, which the assistant message above it "
                "did not make.",
            )


def _store(
    *,
    user: User,
    conversations: list[ImportedConversation],
    flags: dict[str, str],
) -> list[Conversation]:
    """Create the rows (bulk, four inserts per kind at most); return the conversations.
    ``flags``: the category code of each flagged text (marks its messages). A
    conversation whose title the user already has is titled "<title> (imported)"
    (:func:`title_of_copy`), so a copy reads apart from its original; titles repeated
    within the file are kept as they are."""
    chunk_ids = {
        c for conv in conversations for m in conv.messages for _n, c in m.citations
    }
    own_chunks = set(
        Chunk.objects.filter(user=user, id__in=chunk_ids).values_list("id", flat=True)
    )
    rows: list[Conversation] = []
    messages: list[Message] = []
    feedback: list[Feedback] = []
    citations: list[Citation] = []
    leaves: list[tuple[Conversation, uuid.UUID]] = []
    taken = set(
        Conversation.objects.filter(
            user=user, title__in={c.title for c in conversations}
        ).values_list("title", flat=True)
    )
    for imported in conversations:
        title = imported.title
        conv = Conversation(
            user=user,
            title=title_of_copy(title) if title in taken else title,
            created_at=imported.created_at,
            updated_at=imported.updated_at,
        )
        rows.append(conv)
        ids = {m.key: uuid.uuid4() for m in imported.messages}
        for m in imported.messages:
            message = Message(
                id=ids[m.key],
                conversation=conv,
                parent_id=ids[m.parent_key] if m.parent_key else None,
                role=m.role,
                content=m.content,
                status=m.status,
                model=m.model,
                pool=m.pool,
                created_at=m.created_at,
                finish_reason=m.finish_reason,
                error=m.error,
                token_count=m.token_count,
                prompt_tokens=m.prompt_tokens,
                cached_tokens=m.cached_tokens,
                ttft_ms=m.ttft_ms,
                latency_ms=m.latency_ms,
                cache_kind=m.cache_kind,
                tool_calls=m.tool_calls,
                tool_call_id=m.tool_call_id,
                tool_name=m.tool_name,
                tool_detail=m.tool_detail,
                moderation_category=_flag(m, flags),
            )
            messages.append(message)
            if m.feedback is not None:
                feedback.append(Feedback(user=user, message=message, **m.feedback))
            # a citation points at a passage of the importer's own documents, or
            # is dropped (another user's export names passages they cannot see)
            citations += [
                Citation(message=message, chunk_id=chunk, number=number)
                for number, chunk in m.citations
                if chunk in own_chunks
            ]
        if imported.current_leaf_key in ids:
            leaves.append((conv, ids[imported.current_leaf_key]))
    Conversation.objects.bulk_create(rows, batch_size=1000)
    # foreign keys are checked at commit (deferrable), so parents may come after
    # their children within the batch
    Message.objects.bulk_create(messages, batch_size=2000)
    Feedback.objects.bulk_create(feedback, batch_size=2000)
    Citation.objects.bulk_create(citations, batch_size=2000, ignore_conflicts=True)
    for conv, leaf_id in leaves:
        Conversation.objects.filter(id=conv.id).update(current_leaf_id=leaf_id)
    return rows


def _screened(m: ImportedMessage) -> list[str]:
    """The texts of a message that reach prompts: its content, its calls' arguments."""
    texts = [m.content] if m.content else []
    return texts + [c["arguments"] for c in m.tool_calls if c["arguments"]]


def _flag(m: ImportedMessage, flags: dict[str, str]) -> str:
    """The category of the first of ``m``'s texts moderation flagged, or ""."""
    return next((flags[t] for t in _screened(m) if t in flags), "")


def conversations_import(*, user: User, data: bytes) -> ImportResult:
    """Import every conversation of the file ``data`` (bytes) for ``user``, in one
    transaction; return them in the file's order with the count of flagged messages.

    Every message with text is screened first (:func:`history_screen`, no lock
    held). Raises PayloadTooLarge or InvalidInput (see :func:`import_file_parse`),
    ModerationUnavailable (503, moderation down and failing closed); then nothing is
    stored.
    """
    conversations = import_file_parse(data=data)
    messages = [m for c in conversations for m in c.messages]
    texts = [t for m in messages for t in _screened(m)]
    flags = {
        t: f
        for t, f in zip(texts, history_screen(user=user, texts=texts), strict=True)
        if f
    }
    flagged = sum(1 for m in messages if _flag(m, flags))
    with transaction.atomic():
        stored = _store(user=user, conversations=conversations, flags=flags)
    return ImportResult(conversations=stored, flagged=flagged)

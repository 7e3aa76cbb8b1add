"""Conversation edits and background jobs: rename, delete, title, summarise."""

from __future__ import annotations

import functools
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from chatsite.errors import InvalidInput
from conversations import prompt_history, selectors
from conversations.models import Conversation, Message
from conversations.services.text import is_blank, text_check, title_from_text
from conversations.titles import markdown_first_text, title_acceptable
from gateway import generations
from inference.tokens import prompt_counter
from memory import summary as memory_summary

# Summary generations one run makes at most (each up to MEMORY_GENERATION_TIMEOUT_S):
# a long imported history is folded over the next turns' runs, not one Celery task.
SUMMARY_ROUNDS_MAX = 4


def _chain_answer(head: Message) -> Message:
    """Return the answer at the end of the tool chain that starts with ``head`` (the
    newest version at each link), or ``head`` when the chain has no final answer."""
    tree = selectors.message_tree(conversation=head.conversation)
    node = head
    while True:
        below = [
            c for c in tree.children.get(node.id, []) if c.role != Message.Role.USER
        ]
        if not below:
            break
        node = below[-1]
    return node if node.role == Message.Role.ASSISTANT else head


def conversation_title_generate(*, conversation_id: Any) -> str | None:
    """Title a conversation after its first exchange; return the title set, or None.

    Once the first answer completed, the model writes a title of the first message
    (pool MEMORY_SMALL_POOL, under a JSON Schema: :func:`memory.summary.title_generate`);
    its Markdown is stripped, and it replaces the first-message title (the first user
    message's plain text cut at a word boundary to CHAT_TITLE_MAX_CHARS,
    :func:`title_from_text`) only when :func:`conversations.titles.title_acceptable`
    finds it a real title, not a piece of the answer. The first answer must be complete, or
    stopped by the user with some text (status cancelled). On a failed, cut, empty or
    refused generation, or when the first answer failed or was stopped before any text,
    the first-message title stays. A title the user
    changed is never overwritten; only the first exchange is titled (idempotent).
    """
    conversation = Conversation.objects.filter(id=conversation_id).first()
    if conversation is None:
        return None
    first = (
        conversation.messages.filter(role=Message.Role.USER)
        .order_by("created_at")
        .first()
    )
    if first is None:
        return None
    default = title_from_text(first.content)
    if conversation.title != default:
        return None  # renamed by the user, or titled already
    answer = (
        conversation.messages.filter(parent=first, role=Message.Role.ASSISTANT)
        .order_by("-created_at")
        .first()
    )
    if answer is not None and answer.tool_calls:
        answer = _chain_answer(answer)
    title = None
    if (
        answer is not None
        # a first answer stopped by the user with text shown is titled too: the title
        # is written from the first message, which the stop does not change
        and answer.status in (Message.Status.COMPLETE, Message.Status.CANCELLED)
        and answer.content.strip()
        and first.content.strip()
    ):
        title = memory_summary.title_generate(
            user_text=first.content,
            pool=settings.MEMORY_SMALL_POOL,
            timeout_s=settings.MEMORY_GENERATION_TIMEOUT_S,
        )
    if title:
        title = markdown_first_text(title)  # "**Cats** facts" reads "Cats facts"
    if (
        not title
        or answer is None
        or not title_acceptable(title, answer=answer.content)
    ):
        title = default  # the first-message title stays
    title = title[:200].strip() or default
    updated = Conversation.objects.filter(id=conversation.id, title=default).update(
        title=title
    )
    return title if updated else None


def conversation_summarize(*, conversation_id: Any) -> bool:
    """Roll a conversation's summary forward when its unsummarised history is long.

    Summarises the current branch. When the messages after
    ``summary_upto`` (when it lies on that branch; else all of them) pass
    MEMORY_SUMMARY_TRIGGER_TOKENS tokens (serving tokenizer), all but the last MEMORY_SUMMARY_KEEP_MESSAGES are folded into
    the summary by the model (pool MEMORY_SMALL_POOL). Each job's prompt and answer
    fit MEMORY_CONTEXT_TOKENS: a longer history is folded in rounds, oldest first
    (:func:`memory.summary.summary_fit`), each complete round stored as the new
    summary, at most SUMMARY_ROUNDS_MAX rounds a run (the next turn's run goes on).
    A failed or cut generation ends the run and changes nothing more (the last
    complete summary stays in force); each update is conditional on ``summary_upto``
    being unchanged, so concurrent or repeated runs are idempotent. Returns True if
    a new summary was stored.
    """
    conversation = Conversation.objects.filter(id=conversation_id).first()
    if conversation is None:
        return False
    # the exchange only: the user's messages and the answers; tool calls and results
    # are the answers' working, not summarised (a summary of a prefix drops them)
    messages = [
        m
        for m in prompt_history.context_messages(conversation=conversation)
        if m.role != Message.Role.TOOL and not m.tool_calls
    ]
    upto = conversation.summary_upto
    # The summary covers a prefix of one branch: roll it forward only on that branch;
    # on another branch (an edit or a switch) start a new summary of the current one.
    if upto is not None and any(m.id == upto.id for m in messages):
        messages = [m for m in messages if m.created_at > upto.created_at]
    else:
        upto = None
    keep = settings.MEMORY_SUMMARY_KEEP_MESSAGES
    older = messages[:-keep] if keep else messages
    # the kept window must start with a user turn
    while older and older[-1].role != Message.Role.ASSISTANT:
        older = older[:-1]
    if not older:
        return False
    count = prompt_counter(settings.MEMORY_TOKENIZER_ENGINE)
    as_dicts = [{"role": m.role, "content": m.content} for m in messages]
    if count(as_dicts) < settings.MEMORY_SUMMARY_TRIGGER_TOKENS:
        return False
    limit = settings.MEMORY_CONTEXT_TOKENS - memory_summary.SUMMARY_MAX_TOKENS
    previous = conversation.summary if upto is not None else ""
    upto_id = conversation.summary_upto_id  # the stored one, on this branch or not
    stored = False
    for _round in range(SUMMARY_ROUNDS_MAX):
        prompt, covered = memory_summary.summary_fit(
            previous=previous,
            messages=[{"role": m.role, "content": m.content} for m in older],
            count=count,
            limit=limit,
        )
        if not covered:
            break
        summary = memory_summary.summary_generate(
            prompt=prompt,
            pool=settings.MEMORY_SMALL_POOL,
            timeout_s=settings.MEMORY_GENERATION_TIMEOUT_S,
        )
        if summary is None:
            break
        # a complete summary of a prefix is a checkpoint; a run that lost the race
        # to another stops
        end = older[covered - 1]
        if not Conversation.objects.filter(
            id=conversation.id, summary_upto=upto_id
        ).update(summary=summary, summary_upto=end):
            break
        stored = True
        previous, upto_id, older = summary, end.id, older[covered:]
        if not older:
            break
    return stored


def conversation_rename(
    *, user: User, conversation_id: Any, title: Any
) -> Conversation:
    """Rename the user's conversation.

    Raises NotFound (not the user's conversation) before InvalidInput (empty, over 200
    characters, or a NUL character).
    """
    conversation = selectors.conversation_get(
        user=user, conversation_id=conversation_id
    )
    if not isinstance(title, str) or is_blank(title):
        raise InvalidInput("A title cannot be empty.", code="empty_title")
    text_check(title, what="title")
    title = " ".join(title.split())
    if len(title) > 200:
        raise InvalidInput(
            "A title can be at most 200 characters long.", code="title_too_long"
        )
    conversation.title = title
    conversation.save(update_fields=["title"])
    return conversation


def conversation_delete(*, user: User, conversation_id: Any) -> None:
    """Delete the user's conversation and its messages; a streaming answer is cancelled."""
    conversation = selectors.conversation_get(
        user=user, conversation_id=conversation_id
    )
    streaming = [
        m.job_id for m in conversation.messages.filter(status=Message.Status.STREAMING)
    ]
    conversation.delete()
    for job_id in streaming:
        transaction.on_commit(
            functools.partial(
                generations.generation_abandon, user_id=user.pk, job_id=job_id
            )
        )

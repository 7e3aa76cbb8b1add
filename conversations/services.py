"""Writes of the chat: the turn (start, stop, regenerate, finalise) and conversation edits.

A turn (DESIGN §4): one transaction stores the user message and an assistant message in
``streaming`` status; after commit the gateway enqueues the generation. The assistant
message is finalised from its Redis event stream by whoever sees the terminal event first
(the SSE relay, or the periodic reaper); finalisation is a conditional UPDATE, so it is
idempotent and race-free.
"""

from __future__ import annotations

import logging
import time
import unicodedata
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from chatsite.errors import Conflict, InvalidInput, PayloadTooLarge
from conversations import selectors
from conversations.models import Conversation, Message
from gateway import selectors as gateway_selectors
from gateway import services as gateway
from inference import client as inference_client
from inference import protocol
from inference.tokens import prompt_counter
from memory import services as memory_services
from memory import summary as memory_summary
from memory import tasks as memory_tasks
from memory.context import BuiltContext, turn_context

logger = logging.getLogger(__name__)

BUSY_MESSAGE = "An answer is still being written in this conversation. Stop it or wait for it to finish."


@dataclass
class Turn:
    """What a started turn produced."""

    conversation: Conversation
    user_message: Message
    assistant_message: Message
    created_conversation: bool = False


def _is_blank(text: str) -> bool:
    """True if ``text`` has no visible character (spaces, controls, zero-width marks)."""
    return all(ch.isspace() or unicodedata.category(ch) in _INVISIBLE for ch in text)


_INVISIBLE = {"Cc", "Cf", "Zs", "Zl", "Zp"}


def _check_text(text: str, *, what: str) -> None:
    if "\x00" in text:
        raise InvalidInput(
            f"Your {what} contains a NUL character (\\0), which cannot be stored. "
            "Remove it and try again.",
            code="invalid_character",
        )


def _validate_content(content: Any) -> str:
    if not isinstance(content, str) or _is_blank(content):
        raise InvalidInput(
            "Your message is empty. Type something to send.", code="empty_message"
        )
    _check_text(content, what="message")
    limit = settings.CHAT_MAX_MESSAGE_CHARS
    if len(content) > limit:
        raise PayloadTooLarge(
            f"Your message is {len(content):,} characters long; the limit is {limit:,}. "
            "Shorten it or split it into several messages.",
            code="message_too_long",
        )
    return content


def title_from_text(text: str) -> str:
    """Return a conversation title: the text's first line, cut to CHAT_TITLE_MAX_CHARS.

    Never empty: whitespace-only text gives "New chat".
    """
    line = " ".join(text.split())
    limit = settings.CHAT_TITLE_MAX_CHARS
    if len(line) > limit:
        line = line[: limit - 1].rstrip() + "…"
    return line or "New chat"


def _generation_params(params: dict[str, Any] | None) -> dict[str, Any]:
    merged: dict[str, Any] = {
        "max_tokens": settings.CHAT_MAX_TOKENS,
        "temperature": settings.CHAT_TEMPERATURE,
    }
    merged.update(params or {})
    return merged


def _prompt_context(
    *,
    user: AbstractBaseUser,
    conversation: Conversation | None,
    max_tokens: int,
    content: str | None = None,
) -> BuiltContext:
    """Build the prompt of the next answer to the token (memory.context.turn_context).

    The thread so far (with its rolling summary) plus ``content``; without ``content``
    (regenerate) the current answer to the last user message is left out, as the new
    answer replaces it. ``max_tokens`` is the answer's reserve, in tokens. Built before
    anything is stored, so the gateway can reserve its tokens first.
    """
    history: list[dict[str, str]] = []
    summary, covers = "", 0
    if conversation is not None:
        history, summary, covers = selectors.history_and_summary(
            conversation=conversation
        )
    if content is not None:
        history.append({"role": Message.Role.USER, "content": content})
    while history and history[-1]["role"] == Message.Role.ASSISTANT:
        history.pop()
    return turn_context(
        user_id=user.pk,
        system_prompt=settings.CHAT_SYSTEM_PROMPT,
        history=history,
        max_tokens=max_tokens,
        summary=summary,
        summary_covers=min(covers, len(history)),
    )


def _cache_policy(
    built: BuiltContext, *, lookup: bool, opt_in: bool = False
) -> gateway.CachePolicy:
    """How a turn may use the gateway's answer caches (gateway.cache): the semantic cache
    needs a first turn without memory; ``lookup`` False (regenerate) never serves one;
    ``opt_in`` (the user's "Reuse cached answers" preference) lets a turn at
    CHAT_TEMPERATURE > 0 use them at all."""
    return gateway.CachePolicy(
        single_turn=built.history_kept == 1
        and built.history_dropped == 0
        and not built.summary_used,
        personal=bool(built.facts or built.passages or built.summary_used),
        opt_in=opt_in,
        lookup=lookup,
    )


def _admit(
    *,
    user: AbstractBaseUser,
    conversation: Conversation | None,
    job_id: str,
    params: dict[str, Any] | None,
    model: str | None,
    cache_lookup: bool,
    content: str | None = None,
) -> tuple[BuiltContext, gateway.Admission]:
    """Build the next answer's prompt and pass it through the gateway (reserve, route).

    The answer caches are used when the request is deterministic or the user turned on
    "Reuse cached answers" (:func:`gateway.selectors.cache_opt_in`). Raises the
    gateway's errors (QuotaExceeded, PoolSaturated, Forbidden, NotFound) before anything
    is stored.
    """
    generation_params = _generation_params(params)
    built = _prompt_context(
        user=user,
        conversation=conversation,
        content=content,
        max_tokens=int(generation_params["max_tokens"]),
    )
    admission = gateway.generation_admit(
        user=user,
        job_id=job_id,
        messages=built.messages,
        prompt_tokens=built.prompt_tokens,
        params=generation_params,
        model=model,
        cache_policy=_cache_policy(
            built,
            lookup=cache_lookup,
            opt_in=gateway_selectors.cache_opt_in(user=user),
        ),
    )
    return built, admission


def _submit_on_commit(
    *,
    conversation: Conversation,
    assistant: Message,
    built: BuiltContext,
    params: dict[str, Any],
    cache_hit: gateway.CacheHit | None = None,
) -> None:
    """Store the answer's citations and enqueue its prompt (or serve the cache hit)
    after commit."""
    messages = built.messages
    if built.passages:
        memory_services.citations_store(
            message_id=assistant.id, chunk_ids=[p.key for p in built.passages]
        )
    enqueued_at = assistant.created_at.timestamp()

    def submit() -> None:
        gateway.generation_submit(
            job_id=assistant.job_id,
            messages=messages,
            params=params,
            user_ref=str(conversation.user_id),
            pool=assistant.pool,
            enqueued_at=enqueued_at,
            cache_hit=cache_hit,
        )

    transaction.on_commit(submit)


def _remember_on_commit(*, user: AbstractBaseUser, message: Message) -> None:
    """Queue storing the fact of a "remember that …" message (after commit)."""
    fact = memory_services.remember_request_parse(message.content)
    if fact:
        user_id, message_id = user.pk, str(message.id)
        transaction.on_commit(
            lambda: memory_tasks.remember_fact.delay(user_id, fact, message_id)
        )


def _assistant_create(
    *, conversation: Conversation, parent: Message, admission: gateway.Admission
) -> Message:
    try:
        with transaction.atomic():
            return Message.objects.create(
                id=uuid.UUID(admission.job_id),
                conversation=conversation,
                role=Message.Role.ASSISTANT,
                status=Message.Status.STREAMING,
                parent=parent,
                pool=admission.pool,
            )
    except IntegrityError as exc:  # the partial unique index: one streaming answer
        raise Conflict(BUSY_MESSAGE, code="conversation_busy") from exc


def turn_start(
    *,
    user: AbstractBaseUser,
    content: Any,
    conversation_id: Any = None,
    params: dict[str, Any] | None = None,
    model: str | None = None,
) -> Turn:
    """Store the user's message and a streaming answer; enqueue the generation on commit.

    ``conversation_id`` None starts a new conversation titled after the message;
    ``model`` is an explicit pool/model choice. The gateway reserves the tokens before
    anything is stored (:func:`gateway.services.generation_admit`). Raises InvalidInput
    (empty), PayloadTooLarge (over CHAT_MAX_MESSAGE_CHARS characters), NotFound (not the
    user's conversation, unknown model), Conflict (an answer is still streaming),
    Forbidden (model not in the plan), QuotaExceeded (429), PoolSaturated (503).
    Nothing is stored and nothing stays reserved when it raises.
    """
    content = _validate_content(content)
    job_id = str(uuid.uuid4())
    with transaction.atomic(), gateway.reservation_guard(job_id=job_id):
        created = conversation_id is None
        conversation = None
        if not created:
            conversation = selectors.conversation_get(
                user=user, conversation_id=conversation_id
            )
            conversation = Conversation.objects.select_for_update().get(
                pk=conversation.pk
            )
            if conversation.messages.filter(status=Message.Status.STREAMING).exists():
                raise Conflict(BUSY_MESSAGE, code="conversation_busy")
        built, admission = _admit(
            user=user,
            conversation=conversation,
            content=content,
            job_id=job_id,
            params=params,
            model=model,
            cache_lookup=True,
        )
        if conversation is None:
            conversation = Conversation.objects.create(
                user=user, title=title_from_text(content)
            )
        user_message = Message.objects.create(
            conversation=conversation, role=Message.Role.USER, content=content
        )
        _remember_on_commit(user=user, message=user_message)
        assistant = _assistant_create(
            conversation=conversation, parent=user_message, admission=admission
        )
        Conversation.objects.filter(pk=conversation.pk).update(
            updated_at=timezone.now()
        )
        _submit_on_commit(
            conversation=conversation,
            assistant=assistant,
            built=built,
            params=admission.params,
            cache_hit=admission.cache_hit,
        )
    return Turn(conversation, user_message, assistant, created_conversation=created)


def turn_regenerate(
    *,
    user: AbstractBaseUser,
    conversation_id: Any,
    params: dict[str, Any] | None = None,
    model: str | None = None,
) -> Turn:
    """Answer the last user message again; the previous answer is kept as an older version.

    Raises NotFound, Conflict (an answer is streaming, or there is nothing to
    regenerate), and the gateway's errors as :func:`turn_start` does.
    """
    job_id = str(uuid.uuid4())
    with transaction.atomic(), gateway.reservation_guard(job_id=job_id):
        conversation = selectors.conversation_get(
            user=user, conversation_id=conversation_id
        )
        conversation = Conversation.objects.select_for_update().get(pk=conversation.pk)
        last_user = (
            conversation.messages.filter(role=Message.Role.USER)
            .order_by("-created_at")
            .first()
        )
        if last_user is None:
            raise Conflict(
                "There is no message to answer again.", code="nothing_to_regenerate"
            )
        if conversation.messages.filter(status=Message.Status.STREAMING).exists():
            raise Conflict(BUSY_MESSAGE, code="conversation_busy")
        # the user wants a new answer: never a cached one (a complete new answer
        # replaces the cached one)
        built, admission = _admit(
            user=user,
            conversation=conversation,
            job_id=job_id,
            params=params,
            model=model,
            cache_lookup=False,
        )
        assistant = _assistant_create(
            conversation=conversation, parent=last_user, admission=admission
        )
        Conversation.objects.filter(pk=conversation.pk).update(
            updated_at=timezone.now()
        )
        _submit_on_commit(
            conversation=conversation,
            assistant=assistant,
            built=built,
            params=admission.params,
            cache_hit=admission.cache_hit,
        )
    return Turn(conversation, last_user, assistant)


def turn_stop(
    *, user: AbstractBaseUser, conversation_id: Any, message_id: Any
) -> Message:
    """Ask the worker to stop a streaming answer; the partial text is kept as ``cancelled``.

    The answer is finalised when the worker's terminal event arrives (within a decode
    step). Stopping an answer that already ended is a no-op. Raises NotFound.
    """
    message = selectors.message_get(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    if message.role != Message.Role.ASSISTANT:
        raise InvalidInput("Only an answer can be stopped.", code="not_stoppable")
    if message.status == Message.Status.STREAMING:
        gateway.generation_cancel(job_id=message.job_id)
    return message


_STATUS_BY_FINISH = {
    protocol.FINISH_STOP: Message.Status.COMPLETE,
    protocol.FINISH_LENGTH: Message.Status.COMPLETE,
    protocol.FINISH_CANCELLED: Message.Status.CANCELLED,
    protocol.FINISH_CONTENT_FILTER: Message.Status.FILTERED,
}


def message_finalize(*, message_id: Any) -> Message | None:
    """Write a streaming answer's final state from its generation stream.

    Reads the stream up to its terminal event: content = all token text, status from the
    finish reason (``error`` event: status error, partial text kept), usage and timings
    from the event, ``cache_kind`` from its ``meta`` event (an answer served from the
    gateway's caches); the gateway records the usage and settles the quota. An engine error
    before the first token is retried on the fallback pool instead (the message stays
    streaming). Returns the updated message, or None if the generation has not ended, was
    retried, or the message was already final (another process finalised it first).
    """
    job_id = str(message_id)
    events = inference_client.generation_events(job_id=job_id)
    if not events or not events[-1].is_terminal:
        return None
    terminal = events[-1]
    text = "".join(e.data["t"] for e in events if e.type == protocol.EVENT_TOKEN)
    if terminal.type == protocol.EVENT_ERROR and not text:
        pool = (
            Message.objects.filter(id=job_id, status=Message.Status.STREAMING)
            .values_list("pool", flat=True)
            .first()
        )
        retried_on = (
            gateway.generation_retry(
                job_id=job_id,
                pool=pool,
                error_code=terminal.data.get("code", ""),
                terminal_id=terminal.id,
            )
            if pool
            else None
        )
        if retried_on is not None:  # failed before its first token: on the fallback
            if retried_on:
                Message.objects.filter(
                    id=job_id, status=Message.Status.STREAMING
                ).update(pool=retried_on)
            return None
    meta = next((e.data for e in events if e.type == protocol.EVENT_META), {})
    usage = protocol.Usage.from_dict(terminal.data.get("usage"))
    fields: dict[str, Any] = {
        "content": text,
        "model": meta.get("model", ""),
        "token_count": usage.completion_tokens,
        "prompt_tokens": usage.prompt_tokens,
        "cached_tokens": usage.cached_tokens,
        "cache_kind": meta.get("cache") or "",
    }
    if terminal.type == protocol.EVENT_DONE:
        fields["status"] = _STATUS_BY_FINISH[terminal.data["finish_reason"]]
        fields["finish_reason"] = terminal.data["finish_reason"]
        fields["ttft_ms"] = terminal.data.get("ttft_ms")
        fields["latency_ms"] = terminal.data.get("latency_ms")
    else:
        fields["status"] = Message.Status.ERROR
        fields["finish_reason"] = "error"
        fields["error"] = terminal.data.get("message", "The answer failed.")
    with transaction.atomic():
        updated = Message.objects.filter(
            id=job_id, status=Message.Status.STREAMING
        ).update(**fields)
        if not updated:
            return None
        message = Message.objects.select_related("conversation").get(id=job_id)
        Conversation.objects.filter(pk=message.conversation_id).update(
            updated_at=timezone.now()
        )
        gateway.usage_settle(
            user_id=message.conversation.user_id,
            job_id=job_id,
            message_id=message.id,
            status=message.status,
            usage=usage,
            pool=message.pool,
            model=message.model,
            ttft_ms=message.ttft_ms,
            latency_ms=message.latency_ms,
            cache_hit=bool(meta.get("cache")),
            answer=text,
            finish_reason=message.finish_reason,
        )
        if settings.CHAT_BACKGROUND_JOBS:
            transaction.on_commit(lambda: _after_answer(message=message))
    return message


def _after_answer(*, message: Message) -> None:
    """Queue the background work of a finished answer (DESIGN §9): title the
    conversation after its first exchange, roll its summary, extract user facts."""
    from conversations import tasks

    conversation_id = str(message.conversation_id)
    tasks.title_conversation.delay(conversation_id)
    if message.status != Message.Status.COMPLETE:
        return
    tasks.summarize_conversation.delay(conversation_id)
    if settings.MEMORY_EXTRACT_FACTS and message.parent_id:
        question = Message.objects.filter(id=message.parent_id).first()
        if question is not None:
            memory_tasks.extract_facts.delay(
                message.conversation.user_id,
                [
                    {"role": "user", "content": question.content},
                    {"role": "assistant", "content": message.content},
                ],
                str(question.id),
                settings.MEMORY_SMALL_POOL,
            )


def conversation_title_generate(*, conversation_id: Any) -> str | None:
    """Title a conversation after its first exchange; return the title set, or None.

    The model writes the title (pool MEMORY_SMALL_POOL); on a failed, cut or empty
    generation, or when the first answer failed, the title is the first user message
    cut to CHAT_TITLE_MAX_CHARS (:func:`title_from_text`), never empty. A title the
    user changed is never overwritten; only the first exchange is titled (idempotent).
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
    title = None
    if (
        answer is not None
        and answer.status == Message.Status.COMPLETE
        and answer.content.strip()
        and first.content.strip()
    ):
        title = memory_summary.title_generate(
            user_text=first.content,
            answer_text=answer.content,
            pool=settings.MEMORY_SMALL_POOL,
            timeout_s=settings.MEMORY_GENERATION_TIMEOUT_S,
        )
    title = (title or default)[:200].strip() or default
    updated = Conversation.objects.filter(id=conversation.id, title=default).update(
        title=title
    )
    return title if updated else None


def conversation_summarize(*, conversation_id: Any) -> bool:
    """Roll a conversation's summary forward when its unsummarised history is long.

    When the messages after ``summary_upto`` pass MEMORY_SUMMARY_TRIGGER_TOKENS tokens
    (serving tokenizer), all but the last MEMORY_SUMMARY_KEEP_MESSAGES are folded into
    the summary by the model (pool MEMORY_SMALL_POOL). A failed or cut generation
    changes nothing (the last complete summary stays in force); the update is
    conditional on ``summary_upto`` being unchanged, so concurrent or repeated runs are
    idempotent. Returns True if a new summary was stored.
    """
    conversation = Conversation.objects.filter(id=conversation_id).first()
    if conversation is None:
        return False
    messages = selectors.context_messages(conversation=conversation)
    upto = conversation.summary_upto
    if upto is not None:
        messages = [m for m in messages if m.created_at > upto.created_at]
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
    summary = memory_summary.summary_generate(
        previous=conversation.summary if upto is not None else "",
        messages=[{"role": m.role, "content": m.content} for m in older],
        pool=settings.MEMORY_SMALL_POOL,
        timeout_s=settings.MEMORY_GENERATION_TIMEOUT_S,
    )
    if summary is None:
        return False
    return bool(
        Conversation.objects.filter(
            id=conversation.id, summary_upto=conversation.summary_upto_id
        ).update(summary=summary, summary_upto=older[-1])
    )


def message_watchdog(
    *, message: Message, started: bool, last_event_at: float
) -> str | None:
    """End a streaming answer's generation if it can no longer finish (no worker, timeout).

    Returns the error code written to the stream, or None. See
    :func:`inference.client.generation_watchdog` for the rules and settings used.
    """
    return inference_client.generation_watchdog(
        job_id=message.job_id,
        pool=message.pool or settings.INFERENCE_DEFAULT_POOL,
        enqueued_at=message.created_at.timestamp(),
        queue_timeout_s=settings.INFERENCE_QUEUE_TIMEOUT_S,
        no_worker_grace_s=settings.INFERENCE_NO_WORKER_GRACE_S,
        started=started,
        last_event_at=last_event_at,
    )


def streaming_messages_reap(*, older_than_s: float = 5.0) -> int:
    """Finalise streaming answers nobody is relaying (web process died, tab closed).

    For each answer streaming for more than ``older_than_s`` seconds: finalise it if its
    stream has ended; else apply the watchdog; an answer whose stream is gone for more
    than REAPER_STALE_AFTER_S is marked as an error. Returns how many were finalised.
    """
    now = time.time()
    cutoff = timezone.now() - timezone.timedelta(seconds=older_than_s)
    done = 0
    for message in Message.objects.select_related("conversation").filter(
        status=Message.Status.STREAMING, created_at__lt=cutoff
    ):
        if message_finalize(message_id=message.id):
            done += 1
            continue
        events = inference_client.generation_events(job_id=message.job_id)
        started = bool(events)
        if not started and not inference_client.generation_exists(
            job_id=message.job_id
        ):
            age = now - message.created_at.timestamp()
            if age > settings.REAPER_STALE_AFTER_S:
                lost = Message.objects.filter(
                    id=message.id, status=Message.Status.STREAMING
                ).update(
                    status=Message.Status.ERROR,
                    finish_reason="error",
                    error="This answer was lost. Please regenerate it.",
                )
                if lost:
                    gateway.usage_settle(
                        user_id=message.conversation.user_id,
                        job_id=message.job_id,
                        message_id=message.id,
                        status=Message.Status.ERROR,
                        usage=protocol.Usage(),
                        pool=message.pool,
                    )
                done += lost
                continue
        last_event_at = (
            _entry_time(events[-1].id) if events else message.created_at.timestamp()
        )
        if message_watchdog(
            message=message, started=started, last_event_at=last_event_at
        ):
            if message_finalize(message_id=message.id):
                done += 1
    return done


def _entry_time(entry_id: str) -> float:
    """Return the epoch seconds encoded in a Redis stream entry id."""
    return int(entry_id.split("-", 1)[0]) / 1000.0


def conversation_rename(
    *, user: AbstractBaseUser, conversation_id: Any, title: Any
) -> Conversation:
    """Rename the user's conversation.

    Raises NotFound (not the user's conversation) before InvalidInput (empty, over 200
    characters, or a NUL character).
    """
    conversation = selectors.conversation_get(
        user=user, conversation_id=conversation_id
    )
    if not isinstance(title, str) or _is_blank(title):
        raise InvalidInput("A title cannot be empty.", code="empty_title")
    _check_text(title, what="title")
    title = " ".join(title.split())
    if len(title) > 200:
        raise InvalidInput(
            "A title can be at most 200 characters long.", code="title_too_long"
        )
    conversation.title = title
    conversation.save(update_fields=["title"])
    return conversation


def conversation_delete(*, user: AbstractBaseUser, conversation_id: Any) -> None:
    """Delete the user's conversation and its messages; a streaming answer is cancelled."""
    conversation = selectors.conversation_get(
        user=user, conversation_id=conversation_id
    )
    streaming = [
        m.job_id for m in conversation.messages.filter(status=Message.Status.STREAMING)
    ]
    conversation.delete()
    for job_id in streaming:
        transaction.on_commit(lambda j=job_id: gateway.generation_abandon(job_id=j))

"""The chat turn: send a message, regenerate an answer, stop one (DESIGN §4).

A turn builds its prompt (memory, retrieval: I/O, no lock held), then starts the
generation through the gateway's one lifecycle
(:func:`gateway.generations.generation_start`): admission reserves the tokens, a short
transaction stores the user message and an answer in ``streaming`` status (the
conversation row locked only for that), and the job is submitted after commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from chatsite.errors import Conflict, InvalidInput
from conversations import selectors
from conversations.models import Conversation, DocumentScope, Message
from conversations.services.scope import Scope, scope_parse, scope_store
from conversations.services.text import title_from_text, validate_content
from gateway import generations
from gateway import selectors as gateway_selectors
from gateway.cache import CachePolicy
from inference.embeddings import TextVector
from memory import services as memory_services
from memory import tasks as memory_tasks
from memory.context import BuiltContext, turn_context

BUSY_MESSAGE = "An answer is still being written in this conversation. Stop it or wait for it to finish."


@dataclass
class Turn:
    """What a started turn produced."""

    conversation: Conversation
    user_message: Message
    assistant_message: Message
    created_conversation: bool = False


def _generation_params(params: dict[str, Any] | None) -> dict[str, Any]:
    merged: dict[str, Any] = {
        "max_tokens": settings.CHAT_MAX_TOKENS,
        "temperature": settings.CHAT_TEMPERATURE,
    }
    merged.update(params or {})
    return merged


def _prompt_context(
    *,
    user: User,
    conversation: Conversation | None,
    max_tokens: int,
    query: TextVector,
    after: Message | None,
    content: str | None = None,
    scope: Scope,
) -> BuiltContext:
    """Build the prompt of the next answer to the token (memory.context.turn_context).

    The history is the branch from the root to ``after`` (never another
    branch's messages), with the rolling summary when it lies on that branch, plus
    ``content``: for a new or edited message ``after`` is its parent; to regenerate,
    ``after`` is the question and ``content`` None. ``max_tokens`` is the answer's
    reserve, in tokens; ``query`` the question's shared embedding; ``scope``
    the documents retrieval may search.
    """
    history: list[dict[str, str]] = []
    summary, covers = "", 0
    if conversation is not None:
        history, summary, covers = selectors.history_and_summary(
            conversation=conversation, upto=after
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
        query=query,
        document_ids=scope.retrieval_ids(),
    )


def _scope_current(conversation: Conversation | None) -> Scope:
    """The document scope in force: the conversation's, or for a new one the
    CHAT_DOCUMENT_SCOPE_DEFAULT ("all" or "none")."""
    if conversation is None:
        kind = settings.CHAT_DOCUMENT_SCOPE_DEFAULT
        return Scope(kind=kind if kind == DocumentScope.NONE else DocumentScope.ALL)
    if conversation.doc_scope != DocumentScope.SOME:
        return Scope(kind=conversation.doc_scope)
    return Scope(
        kind=DocumentScope.SOME,
        document_ids=selectors.conversation_scope_ids(conversation=conversation),
    )


def _cache_policy(
    built: BuiltContext, *, query: TextVector, lookup: bool, opt_in: bool = False
) -> CachePolicy:
    """How a turn may use the gateway's answer caches (gateway.cache): the semantic cache
    needs a first turn without memory; ``lookup`` False (regenerate) never serves one;
    ``opt_in`` (the user's "Reuse cached answers" preference) lets a turn at
    CHAT_TEMPERATURE > 0 use them at all."""
    return CachePolicy(
        single_turn=built.history_kept == 1
        and built.history_dropped == 0
        and not built.summary_used,
        personal=bool(built.facts or built.passages or built.summary_used),
        opt_in=opt_in,
        lookup=lookup,
        query=query,
    )


def _idle_check(conversation: Conversation) -> None:
    if conversation.messages.filter(status=Message.Status.STREAMING).exists():
        raise Conflict(BUSY_MESSAGE, code="conversation_busy")


def _assistant_new(
    *,
    conversation: Conversation,
    parent: Message,
    admission: generations.Admission,
    memory_unavailable: bool = False,
) -> Message:
    """The streaming answer of ``admission`` (unsaved; its id is the job id)."""
    return Message(
        id=uuid.UUID(admission.job_id),
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        status=Message.Status.STREAMING,
        parent=parent,
        pool=admission.pool,
        memory_unavailable=memory_unavailable,
    )


def _assistant_create(
    *,
    conversation: Conversation,
    parent: Message,
    admission: generations.Admission,
    memory_unavailable: bool = False,
) -> Message:
    """Store the streaming answer; raise Conflict if the conversation already has one
    (the partial unique index, checked in a savepoint)."""
    answer = _assistant_new(
        conversation=conversation,
        parent=parent,
        admission=admission,
        memory_unavailable=memory_unavailable,
    )
    try:
        with transaction.atomic():
            answer.save(force_insert=True)
    except IntegrityError as exc:  # the partial unique index: one streaming answer
        raise Conflict(BUSY_MESSAGE, code="conversation_busy") from exc
    return answer


def _remember_on_commit(*, user: User, message: Message) -> None:
    """Queue storing the fact of a "remember that …" message (after commit)."""
    fact = memory_services.remember_request_parse(message.content)
    if fact:
        user_id, message_id = user.pk, str(message.id)
        transaction.on_commit(
            lambda: memory_tasks.remember_fact.delay(user_id, fact, message_id)
        )


def _turn_run(
    *,
    user: User,
    conversation: Conversation | None,
    params: dict[str, Any] | None,
    model: str | None,
    content: str | None = None,
    question: Message | None = None,
    after: Message | None = None,
    scope: Scope | None = None,
) -> Turn:
    """Build the prompt, then start the generation; the rows are stored by ``store``
    inside the lifecycle's short transaction (nothing but these writes under the lock).

    ``content`` a new user message whose parent is ``after`` (the current leaf, or the
    parent of an edited message), or ``question`` the user message to answer again.
    The new answer becomes the conversation's current leaf.
    No ``model``: the user's default model (Settings), if they chose one.
    ``scope`` a document scope sent with the message (stored on the conversation);
    None keeps the conversation's (a new one: CHAT_DOCUMENT_SCOPE_DEFAULT).
    """
    # one read of the user's preferences: the default model and the cache opt-in
    preference = gateway_selectors.user_preference_get(user=user)
    model = model or gateway_selectors.default_model(user=user, preference=preference)
    generation_params = _generation_params(params)
    in_force = scope if scope is not None else _scope_current(conversation)
    # The question is embedded at most once, on first need, for everyone who needs it.
    if content is not None:
        asked_text = content
    else:
        assert question is not None  # a turn has new content or a question to answer
        asked_text = question.content
    query = TextVector(asked_text)
    built = _prompt_context(
        user=user,
        conversation=conversation,
        content=content,
        max_tokens=int(generation_params["max_tokens"]),
        query=query,
        after=after if content is not None else question,
        scope=in_force,
    )

    def store(admission: generations.Admission) -> Turn:
        if conversation is None:
            return _new_thread_store(admission)
        thread = Conversation.objects.select_for_update().get(pk=conversation.pk)
        _idle_check(thread)
        if scope is not None:
            scope_store(conversation=thread, scope=in_force)
        if content is not None:
            asked = Message.objects.create(
                conversation=thread,
                role=Message.Role.USER,
                content=content,
                parent=after,
            )
            _remember_on_commit(user=user, message=asked)
        else:
            assert question is not None
            asked = question
        answer = _assistant_create(
            conversation=thread,
            parent=asked,
            admission=admission,
            memory_unavailable=built.memory_unavailable,
        )
        _citations_store(answer)
        thread.updated_at, thread.current_leaf = timezone.now(), answer
        Conversation.objects.filter(pk=thread.pk).update(
            updated_at=thread.updated_at, current_leaf=answer
        )
        return Turn(thread, asked, answer, created_conversation=False)

    def _new_thread_store(admission: generations.Admission) -> Turn:
        # A new conversation: no other answer can stream in it (no savepoint), and the
        # answer is its leaf from the start (the foreign key is DEFERRABLE INITIALLY
        # DEFERRED, checked at commit): two INSERTs and the COMMIT, each statement a
        # round trip of the turn's POST.
        assert content is not None
        thread = Conversation.objects.create(
            user=user,
            title=title_from_text(content),
            doc_scope=in_force.kind,  # created with its scope: no update
            current_leaf_id=uuid.UUID(admission.job_id),
        )
        if in_force.document_ids:
            thread.scope_documents.set(in_force.document_ids)
        asked = Message(
            conversation=thread, role=Message.Role.USER, content=content, parent=after
        )
        answer = _assistant_new(
            conversation=thread,
            parent=asked,
            admission=admission,
            memory_unavailable=built.memory_unavailable,
        )
        Message.objects.bulk_create([asked, answer])  # one INSERT for both
        _remember_on_commit(user=user, message=asked)
        _citations_store(answer)
        return Turn(thread, asked, answer, created_conversation=True)

    def _citations_store(answer: Message) -> None:
        if built.passages:
            memory_services.citations_store(
                message_id=answer.id, chunk_ids=[p.key for p in built.passages]
            )

    started = generations.generation_start(
        user=user,
        messages=built.messages,
        prompt_tokens=built.prompt_tokens,
        context_tokens=built.prompt_tokens,
        params=generation_params,
        surface=generations.Surface.CHAT,
        # input moderation reads the same vector as memory and the semantic cache
        query=query,
        conversation_id=conversation.pk if conversation is not None else None,
        message_id=question.pk if question is not None else None,
        model=model,
        cache_policy=_cache_policy(
            built,
            query=query,
            # the user asks for a new answer: never a cached one (a complete new
            # answer replaces the cached one)
            lookup=content is not None,
            opt_in=preference.reuse_cached_answers,
        ),
        store=store,
    )
    assert started.stored is not None
    return started.stored


def turn_start(
    *,
    user: User,
    content: Any,
    conversation_id: Any = None,
    params: dict[str, Any] | None = None,
    model: str | None = None,
    doc_scope: Any = None,
    document_ids: Sequence[Any] = (),
) -> Turn:
    """Store the user's message and a streaming answer; enqueue the generation.

    ``conversation_id`` None starts a new conversation titled after the message; in an
    existing one the message continues the current branch (its parent is the current
    leaf) and its answer becomes the leaf. ``model`` is an explicit pool/model choice.
    ``doc_scope`` ("all"/"none"/"some", with ``document_ids`` for "some") sets the
    conversation's document scope with this message (:mod:`conversations.services.scope`);
    None keeps the one in force. Raises InvalidInput (empty, a bad scope),
    PayloadTooLarge (over CHAT_MAX_MESSAGE_CHARS characters), NotFound (not the user's
    conversation or document, unknown model), Conflict (an answer is still streaming), Forbidden
    (model not in the plan), ModerationBlocked (400, the content policy; a moderation
    event is recorded), ModerationUnavailable (503, failing closed), QuotaExceeded
    (429), PoolSaturated (503). Nothing is stored and nothing stays reserved when it
    raises.
    """
    content = validate_content(content)
    conversation = None
    if conversation_id is not None:
        conversation = selectors.conversation_get(
            user=user, conversation_id=conversation_id
        )
        _idle_check(conversation)  # early: no prompt built for a busy thread
    scope = None
    if doc_scope is not None:
        scope = scope_parse(user=user, kind=doc_scope, document_ids=document_ids)
    return _turn_run(
        user=user,
        conversation=conversation,
        content=content,
        params=params,
        model=model,
        after=selectors.thread_leaf(conversation=conversation)
        if conversation is not None
        else None,
        scope=scope,
    )


def turn_regenerate(
    *,
    user: User,
    conversation_id: Any,
    message_id: Any = None,
    params: dict[str, Any] | None = None,
    model: str | None = None,
) -> Turn:
    """Answer a question again: a new sibling version of the answer ``message_id``
    (default: the last question of the current branch), made current; the earlier
    versions stay, reachable with the version switcher.

    Raises NotFound (not the user's conversation or message), InvalidInput
    (``message_id`` is not an answer), Conflict (an answer is streaming, or there is
    nothing to regenerate), and the gateway's errors as :func:`turn_start` does.
    """
    conversation = selectors.conversation_get(
        user=user, conversation_id=conversation_id
    )
    if message_id is not None:
        answer = selectors.message_get(
            user=user, conversation_id=conversation.id, message_id=message_id
        )
        if answer.role != Message.Role.ASSISTANT or answer.parent_id is None:
            raise InvalidInput(
                "Only an answer can be regenerated.", code="not_regenerable"
            )
        question: Message | None = Message.objects.get(id=answer.parent_id)
    else:
        path = selectors.message_tree(conversation=conversation).current_path(
            conversation
        )
        users = [m for m in path if m.role == Message.Role.USER]
        question = users[-1] if users else None
    if question is None:
        raise Conflict(
            "There is no message to answer again.", code="nothing_to_regenerate"
        )
    _idle_check(conversation)
    return _turn_run(
        user=user,
        conversation=conversation,
        question=question,
        params=params,
        model=model,
    )


def turn_stop(*, user: User, conversation_id: Any, message_id: Any) -> Message:
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
        generations.generation_cancel(job_id=message.job_id)
    return message

"""Store a turn's rows: the user message, the streaming answer, the conversation.

:func:`rows_store` is the ``store`` step of :func:`gateway.generations.generation_start`:
it runs in the lifecycle's short, durable transaction after admission, and nothing but
these writes runs under the conversation's row lock. A new conversation's plain first
message is one statement and runs without that transaction (:func:`rows_one_statement`).
"""

from __future__ import annotations

import uuid

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from chatsite.errors import Conflict
from conversations.models import Conversation, Message
from conversations.services.scope import Scope, scope_store
from conversations.services.text import title_from_text
from conversations.services.turns.request import Turn, TurnRequest
from conversations.services.turns.rows_sql import thread_insert
from gateway import generations
from memory import services as memory_services
from memory import tasks as memory_tasks
from memory.context import BuiltContext

CONTINUE_LAST_MESSAGE = (
    "Only the last answer of a conversation can be continued: this one has a reply."
)
CONTINUE_CHANGED_MESSAGE = "This answer changed meanwhile. Reload and try again."
BUSY_MESSAGE = "An answer is still being written in this conversation. Stop it or wait for it to finish."


def idle_check(conversation: Conversation, *, tools: bool = True) -> None:
    """Raise Conflict (``conversation_busy``) if an answer streams in ``conversation``
    or (``tools``) one of its tool steps runs (:func:`.tools.tool_running`)."""
    from conversations.services.turns.tools import tool_running

    if conversation.messages.filter(status=Message.Status.STREAMING).exists():
        raise Conflict(BUSY_MESSAGE, code="conversation_busy")
    if tools and tool_running(conversation_id=conversation.pk):
        raise Conflict(BUSY_MESSAGE, code="conversation_busy")


def assistant_new(
    *,
    conversation: Conversation,
    parent: Message,
    admission: generations.Admission,
    memory_unavailable: bool = False,
) -> Message:
    """Return the streaming answer of ``admission`` (unsaved; its id is the job id)."""
    return Message(
        id=uuid.UUID(admission.job_id),
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        status=Message.Status.STREAMING,
        parent=parent,
        pool=admission.pool,
        memory_unavailable=memory_unavailable,
    )


def assistant_create(
    *,
    conversation: Conversation,
    parent: Message,
    admission: generations.Admission,
    memory_unavailable: bool = False,
) -> Message:
    """Store the streaming answer; raise Conflict if the conversation already has one
    (the partial unique index, checked in a savepoint)."""
    answer = assistant_new(
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


def remember_on_commit(*, user: User, message: Message) -> None:
    """Queue storing the fact of a "remember that …" message (after commit)."""
    fact = memory_services.remember_request_parse(message.content)
    if fact:
        user_id, message_id = user.pk, str(message.id)
        transaction.on_commit(
            lambda: memory_tasks.remember_fact.delay(user_id, fact, message_id)
        )


def citations_store(answer: Message, built: BuiltContext) -> None:
    """Store which document chunks the prompt ``built`` quoted for ``answer``."""
    if built.passages:
        memory_services.citations_store(
            message_id=answer.id, chunk_ids=[p.key for p in built.passages]
        )


def rows_one_statement(turn: TurnRequest, *, built: BuiltContext, scope: Scope) -> bool:
    """Whether :func:`rows_store` writes ``turn``'s rows with one statement and nothing
    else that a transaction would undo: a first message (a new conversation,
    :func:`new_thread_rows_store`) with no scope documents and no citations, whose
    remembered fact, if any, is queued after the write as on commit. Such a store
    needs no BEGIN and COMMIT around it (in autocommit the statement is its own
    transaction, its deferred foreign keys checked at its end), so a failure leaves
    nothing stored."""
    return turn.conversation is None and not scope.document_ids and not built.passages


def rows_store(
    turn: TurnRequest,
    admission: generations.Admission,
    *,
    built: BuiltContext,
    scope: Scope,
) -> Turn:
    """Store the turn's rows for ``admission``: in a new conversation
    (:func:`new_thread_rows_store`) or an existing one (:func:`thread_rows_store`).

    ``built`` is the turn's prompt (its citations, whether memory was unavailable);
    ``scope`` the document scope in force. Call inside a transaction. Raises Conflict
    when another answer streams in the conversation.
    """
    if turn.conversation is None:
        return new_thread_rows_store(turn, admission, built=built, scope=scope)
    if turn.continues is not None:
        return continued_rows_store(turn, admission)
    return thread_rows_store(turn, admission, built=built, scope=scope)


def continued_rows_store(turn: TurnRequest, admission: generations.Admission) -> Turn:
    """Reopen the answer a turn continues for the generation of ``admission``: it
    streams again under that generation's job (``job``, ``job_enqueued_at``), its text
    and tokens so far kept (the settlement adds the new ones), and its branch becomes
    the conversation's current one. Raises Conflict if an answer already streams in
    the conversation, or the answer changed since the turn read it (a reply, or it
    grew: the prompt holds the text read).
    """
    assert turn.conversation is not None and turn.continues is not None
    assert turn.question is not None
    thread = Conversation.objects.select_for_update().get(pk=turn.conversation.pk)
    idle_check(thread)
    answer = turn.continues
    if Message.objects.filter(parent=answer).exists():
        raise Conflict(CONTINUE_LAST_MESSAGE, code="not_continuable")
    now = timezone.now()
    try:
        with transaction.atomic():  # the partial unique index: one streaming answer
            # as the turn read it (its prompt holds that text): not grown since
            reopened = Message.objects.filter(
                pk=answer.pk, status=answer.status, token_count=answer.token_count
            ).update(
                job=uuid.UUID(admission.job_id),
                job_enqueued_at=now,
                status=Message.Status.STREAMING,
                finish_reason="",
                error="",
                pool=admission.pool,
            )
    except IntegrityError as exc:
        raise Conflict(BUSY_MESSAGE, code="conversation_busy") from exc
    if not reopened:
        raise Conflict(CONTINUE_CHANGED_MESSAGE, code="not_continuable")
    answer.refresh_from_db()
    thread.updated_at, thread.current_leaf = now, answer
    Conversation.objects.filter(pk=thread.pk).update(
        updated_at=now, current_leaf=answer
    )
    return Turn(thread, turn.question, answer, created_conversation=False)


def thread_rows_store(
    turn: TurnRequest,
    admission: generations.Admission,
    *,
    built: BuiltContext,
    scope: Scope,
) -> Turn:
    """Store the turn in its existing conversation, whose row is locked meanwhile.

    The new user message (or the question answered again), the streaming answer, a
    scope sent with the message, and the answer as the conversation's current leaf.
    Raises Conflict if an answer already streams in the conversation.
    """
    assert turn.conversation is not None
    thread = Conversation.objects.select_for_update().get(pk=turn.conversation.pk)
    # a tool chain's next step runs under its own step's "tool running" mark
    idle_check(thread, tools=turn.last is None)
    if turn.scope is not None:
        scope_store(conversation=thread, scope=scope)
    if turn.content is not None:
        asked = Message.objects.create(
            conversation=thread,
            role=Message.Role.USER,
            content=turn.content,
            parent=turn.after,
        )
        remember_on_commit(user=turn.user, message=asked)
    else:
        assert turn.question is not None
        asked = turn.question
    answer = assistant_create(
        conversation=thread,
        parent=turn.last if turn.last is not None else asked,
        admission=admission,
        memory_unavailable=built.memory_unavailable,
    )
    citations_store(answer, built)
    thread.updated_at, thread.current_leaf = timezone.now(), answer
    Conversation.objects.filter(pk=thread.pk).update(
        updated_at=thread.updated_at, current_leaf=answer
    )
    return Turn(thread, asked, answer, created_conversation=False)


def new_thread_rows_store(
    turn: TurnRequest,
    admission: generations.Admission,
    *,
    built: BuiltContext,
    scope: Scope,
) -> Turn:
    """Create the conversation of a first message, titled after it, with its rows.

    No other answer can stream in a new conversation (no savepoint), and the answer is
    its leaf from the start (the foreign key is DEFERRABLE INITIALLY DEFERRED, checked
    at commit): one INSERT statement (:func:`thread_insert`), then the scope's
    documents and the citations when there are any. Without those it may run outside
    a transaction (:func:`rows_one_statement`).
    """
    assert turn.content is not None
    thread = Conversation(
        user=turn.user,
        title=title_from_text(turn.content),
        doc_scope=scope.kind,  # created with its scope: no update
        current_leaf_id=uuid.UUID(admission.job_id),
    )
    asked = Message(
        conversation=thread,
        role=Message.Role.USER,
        content=turn.content,
        parent=turn.after,
    )
    answer = assistant_new(
        conversation=thread,
        parent=asked,
        admission=admission,
        memory_unavailable=built.memory_unavailable,
    )
    thread_insert(thread, [asked, answer])  # one statement for the three rows
    if scope.document_ids:
        thread.scope_documents.set(scope.document_ids)
    remember_on_commit(user=turn.user, message=asked)
    citations_store(answer, built)
    return Turn(thread, asked, answer, created_conversation=True)

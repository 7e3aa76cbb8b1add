"""Store a turn's tool steps in the conversation tree (the tool loop's writes).

A step: the assistant message that called tools gets its calls
(:func:`tool_calls_store`), then each result is appended as a ``tool`` message
(:func:`tool_result_append`), the results chained one under the other below the
calling message, so the next generation of the turn is a child of the last result.
:func:`tool_step_append` does both for a whole step in one transaction.

The conversation's row is locked while a result is appended, so results of parallel
calls stored at the same time chain in a line. The leaf moves to the new result only
when it was on its parent (the user did not switch branches meanwhile).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from chatsite.errors import Conflict, InvalidInput
from chatsite.storable import text_problem
from conversations import selectors
from conversations.models import Conversation, Message
from conversations.tool_steps import (
    ToolCall,
    ToolOutput,
    ToolStepProblem,
    calls_clean,
    detail_clean,
    label_default,
)
from inference.protocol import FINISH_TOOL_CALLS


def _problem(exc: ToolStepProblem) -> InvalidInput:
    return InvalidInput(
        f"This tool step cannot be stored: {exc}", code="invalid_tool_step"
    )


def _calling_message(*, user: User, conversation_id: Any, message_id: Any) -> Message:
    """Return the user's assistant message ``message_id``; NotFound otherwise,
    InvalidInput when it is not an assistant message."""
    message = selectors.message_get(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    if message.role != Message.Role.ASSISTANT:
        raise InvalidInput(
            "Only an assistant message can call tools.", code="not_a_tool_call"
        )
    return message


def tool_calls_store(
    *, user: User, conversation_id: Any, message_id: Any, calls: Sequence[ToolCall]
) -> Message:
    """Store ``calls`` on the finished assistant message ``message_id`` (its finish
    reason becomes ``tool_calls``); return the message.

    Idempotent: storing the same calls again changes nothing. Raises NotFound (not
    the user's conversation or message), InvalidInput (not an assistant message, or
    calls of the wrong shape: :func:`conversations.tool_steps.calls_clean`), Conflict
    (``answer_not_complete``: the message is streaming or did not complete;
    ``tool_calls_differ``: it already holds other calls).
    """
    message = _calling_message(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    try:
        stored = calls_clean(
            list(calls), arguments_max_chars=settings.CHAT_IMPORT_MAX_MESSAGE_CHARS
        )
    except ToolStepProblem as exc:
        raise _problem(exc) from None
    with transaction.atomic():
        message = Message.objects.select_for_update().get(pk=message.pk)
        if message.status != Message.Status.COMPLETE:
            raise Conflict(
                "Tools can be called only from an answer that completed.",
                code="answer_not_complete",
            )
        if message.tool_calls:
            if message.tool_calls != stored:
                raise Conflict(
                    "This answer already called other tools.", code="tool_calls_differ"
                )
            return message
        message.tool_calls = stored
        message.finish_reason = FINISH_TOOL_CALLS
        message.save(update_fields=["tool_calls", "finish_reason"])
    return message


def _chain_end(message: Message) -> tuple[Message, set[str]]:
    """Return the last message of ``message``'s results chain (itself when it has no
    result yet) and the call ids already answered; call with the conversation locked."""
    ids = {c["id"] for c in message.tool_calls}
    below = {
        m.parent_id: m
        for m in Message.objects.filter(
            conversation_id=message.conversation_id,
            role=Message.Role.TOOL,
            tool_call_id__in=ids,
        ).order_by("created_at", "id")
    }
    end, answered = message, set()
    while end.id in below:
        end = below[end.id]
        answered.add(end.tool_call_id)
    return end, answered


def tool_result_append(
    *, user: User, conversation_id: Any, message_id: Any, output: ToolOutput
) -> Message:
    """Append the result ``output`` of one call of the assistant message
    ``message_id`` as a ``tool`` message; return it.

    The result's parent is the calling message, or its last result stored so far;
    its ``tool_name`` is the call's, its ``tool_detail`` the label (``output.label``,
    or :func:`conversations.tool_steps.label_default`) and flags. The conversation's
    leaf moves to it when it was on its parent. Raises NotFound (not the user's
    conversation or message), InvalidInput (the message holds no tool calls, no call
    has ``output.tool_call_id``, or the result cannot be stored: a NUL, a label over
    200 characters, text over CHAT_IMPORT_MAX_MESSAGE_CHARS characters), Conflict
    (``tool_result_exists``: that call has its result already).
    """
    message = _calling_message(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    with transaction.atomic():
        conversation = Conversation.objects.select_for_update().get(
            pk=message.conversation_id
        )
        return _result_store(conversation, message.pk, output)


def _result_store(
    conversation: Conversation, message_pk: Any, output: ToolOutput
) -> Message:
    """Store one result below the calling message (conversation row locked)."""
    message = Message.objects.get(pk=message_pk)
    calls = {c["id"]: c for c in message.tool_calls}
    if not calls:
        raise InvalidInput(
            "This answer called no tools: store its calls first.",
            code="not_a_tool_call",
        )
    call = calls.get(output.tool_call_id)
    if call is None:
        raise InvalidInput(
            f"This answer made no tool call with the id {output.tool_call_id[:40]!r}.",
            code="unknown_tool_call",
        )
    try:
        content = output.content
        if not isinstance(content, str):
            raise ToolStepProblem("the result must be text.")
        if len(content) > settings.CHAT_IMPORT_MAX_MESSAGE_CHARS:
            raise ToolStepProblem(
                f"the result is longer than {settings.CHAT_IMPORT_MAX_MESSAGE_CHARS:,} "
                "characters."
            )
        detail = detail_clean(
            {
                "label": output.label or label_default(call["name"], call["arguments"]),
                "truncated": output.truncated,
                "error": output.error,
            }
        )
        problem = text_problem(content)
        if problem:
            raise ToolStepProblem(f"the result {problem}.")
    except ToolStepProblem as exc:
        raise _problem(exc) from None
    end, answered = _chain_end(message)
    if output.tool_call_id in answered:
        raise Conflict(
            "This tool call has its result already.", code="tool_result_exists"
        )
    result = Message.objects.create(
        conversation=conversation,
        role=Message.Role.TOOL,
        parent=end,
        content=content,
        tool_call_id=call["id"],
        tool_name=call["name"],
        tool_detail=detail,
    )
    now = timezone.now()
    if conversation.current_leaf_id == end.id:
        Conversation.objects.filter(pk=conversation.pk).update(
            current_leaf=result, updated_at=now
        )
    else:
        Conversation.objects.filter(pk=conversation.pk).update(updated_at=now)
    return result


def tool_step_append(
    *,
    user: User,
    conversation_id: Any,
    message_id: Any,
    calls: Sequence[ToolCall],
    outputs: Sequence[ToolOutput],
) -> list[Message]:
    """Store a whole tool step in one transaction: ``calls`` on the assistant message
    ``message_id`` (:func:`tool_calls_store`), then each of ``outputs``, in order
    (:func:`tool_result_append`); return the stored ``tool`` messages. Nothing is
    stored when it raises what those two raise.
    """
    with transaction.atomic():
        message = tool_calls_store(
            user=user,
            conversation_id=conversation_id,
            message_id=message_id,
            calls=calls,
        )
        conversation = Conversation.objects.select_for_update().get(
            pk=message.conversation_id
        )
        return [_result_store(conversation, message.pk, o) for o in outputs]

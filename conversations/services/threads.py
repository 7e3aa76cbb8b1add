"""Branches of a conversation: edit a message, switch versions.

A conversation is a tree (:class:`conversations.models.Message` ``parent``); the branch
shown and sent as history ends at ``Conversation.current_leaf``. Editing a user message
adds a sibling (same parent) with a new answer and makes that branch current;
switching picks a sibling and follows its newest replies down to a leaf.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from chatsite.errors import Conflict, InvalidInput
from conversations import selectors
from conversations.models import Conversation, Message
from conversations.services.text import validate_content
from conversations.services.turns import Turn, TurnRequest, idle_check, turn_run

SWITCH_BUSY_MESSAGE = (
    "An answer is still being written in this conversation. Stop it or wait for it "
    "to finish before switching versions."
)


def turn_edit(
    *,
    user: User,
    conversation_id: Any,
    message_id: Any,
    content: Any,
    params: dict[str, Any] | None = None,
    model: str | None = None,
) -> Turn:
    """Send an edited version of the user message ``message_id``: a sibling user
    message (same parent) with ``content`` and a new answer; the new branch is current
    and its prompt holds only the messages before the edited one.

    Raises NotFound (not the user's conversation or message), InvalidInput (empty
    content, or ``message_id`` is an answer), PayloadTooLarge (over
    CHAT_MAX_MESSAGE_CHARS characters), Conflict (an answer is streaming), and the
    gateway's errors as :func:`conversations.services.turn_start` does. Nothing is
    stored when it raises.
    """
    content = validate_content(content)
    edited = selectors.message_get(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    if edited.role != Message.Role.USER:
        raise InvalidInput("Only your own messages can be edited.", code="not_editable")
    conversation = edited.conversation
    idle_check(conversation)
    parent = (
        Message.objects.filter(id=edited.parent_id).first()
        if edited.parent_id
        else None
    )
    turn = TurnRequest(
        user=user, conversation=conversation, content=content, after=parent
    )
    return turn_run(turn, params=params, model=model)


def thread_switch(*, user: User, conversation_id: Any, message_id: Any) -> Message:
    """Make the branch through ``message_id`` current: its newest leaf (descending by
    the latest child) becomes ``current_leaf``; return that leaf.

    Raises NotFound (not the user's conversation or message) and Conflict (an answer
    is streaming in this conversation: the branch cannot change under it).
    """
    message = selectors.message_get(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    with transaction.atomic():
        conversation = Conversation.objects.select_for_update().get(
            pk=message.conversation_id
        )
        if conversation.messages.filter(status=Message.Status.STREAMING).exists():
            raise Conflict(SWITCH_BUSY_MESSAGE, code="conversation_busy")
        tree = selectors.message_tree(conversation=conversation)
        leaf = tree.newest_leaf(message.id)
        assert leaf is not None  # the message itself is in the tree
        Conversation.objects.filter(pk=conversation.pk).update(current_leaf=leaf)
    return leaf

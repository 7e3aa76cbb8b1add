"""What a turn answers (conversations/services/turns/request.py): a new message or a
question answered again, never both nor neither; the prompt's history ends where it
should."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from conversations.models import Message
from conversations.services.turns import TurnRequest


def test_a_new_message_is_answered_after_its_parent():
    parent = Message(role=Message.Role.ASSISTANT, content="earlier answer")
    turn = TurnRequest(
        user=AnonymousUser(), conversation=None, content="hello", after=parent
    )
    assert (turn.text, turn.upto) == ("hello", parent)


def test_a_question_answered_again_ends_the_history_at_itself():
    question = Message(role=Message.Role.USER, content="what is 2+2?")
    turn = TurnRequest(user=AnonymousUser(), conversation=None, question=question)
    assert (turn.text, turn.upto) == ("what is 2+2?", question)


@pytest.mark.parametrize("both", [True, False])
def test_a_turn_answers_exactly_one_of_content_and_question(both):
    question = Message(role=Message.Role.USER, content="q") if both else None
    content = "new" if both else None
    with pytest.raises(ValueError):
        TurnRequest(
            user=AnonymousUser(),
            conversation=None,
            content=content,
            question=question,
        )

"""What a chat turn is asked to answer, and what it produced."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User

from conversations.models import Conversation, Message
from conversations.services.scope import Scope


@dataclass(frozen=True)
class TurnRequest:
    """What a turn answers, as the service that starts it found it.

    Either ``content``, a new user message whose parent is ``after`` (the current
    leaf, the parent of an edited message, or None for the first message), or
    ``question``, a stored user message to answer again. ``conversation`` None starts a
    new conversation (with ``content`` only). ``scope`` is a document scope sent with
    the message, stored on the conversation; None keeps the conversation's (a new one:
    CHAT_DOCUMENT_SCOPE_DEFAULT).

    ``last`` set (with ``question``) makes it the next step of a tool chain: the
    history ends at ``last`` (the chain's last tool result) and the answer is its
    child; ``tools_withdrawn`` (the step limit reached) offers that answer no tools.

    ``tool`` names a tool the user picked for this message: the turn's first
    generation must call it (a named ``tool_choice``), its later steps choose freely.

    ``continues`` set (with ``question``): the turn writes on an answer that was cut
    short ("Continue"): the history ends at that answer's parent, then the answer's
    text as the start of the assistant's turn, and the new text is added to it.
    """

    user: User
    conversation: Conversation | None
    content: str | None = None
    question: Message | None = None
    after: Message | None = None
    scope: Scope | None = None
    last: Message | None = None
    tools_withdrawn: bool = False
    tool: str | None = None
    continues: Message | None = None

    def __post_init__(self) -> None:
        """Raise ValueError unless exactly one of ``content`` and ``question`` is set."""
        if (self.content is None) == (self.question is None):
            raise ValueError("A turn answers either new content or a question.")

    @property
    def text(self) -> str:
        """The user's text this turn answers: the new message, or the question's."""
        if self.content is not None:
            return self.content
        assert self.question is not None
        return self.question.content

    @property
    def upto(self) -> Message | None:
        """The last stored message of the prompt's history: ``after`` for a new
        message, ``last`` for a tool chain's next step, the parent of the answer a
        turn continues, the question itself to answer it again."""
        if self.continues is not None:
            return self.continues.parent
        if self.last is not None:
            return self.last
        return self.after if self.content is not None else self.question


@dataclass
class Turn:
    """What a started turn produced."""

    conversation: Conversation
    user_message: Message
    assistant_message: Message
    created_conversation: bool = False

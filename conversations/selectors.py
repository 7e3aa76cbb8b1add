"""Reads of conversations and messages, always scoped to the owner (CONVENTIONS §1)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Prefetch, QuerySet

from chatsite.errors import NotFound
from conversations.models import Conversation, Feedback, Message
from conversations.tool_steps import ToolStep
from inference import keys
from inference.connections import redis_sync
from memory.models import Citation
from safety import selectors as safety_selectors


def _as_uuid(value: Any) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError as exc:
        raise NotFound() from exc


def conversation_list(*, user: User) -> QuerySet[Conversation]:
    """Return the user's conversations, most recently active first."""
    return Conversation.objects.filter(user=user, archived=False).order_by(
        "-updated_at"
    )


def conversation_get(*, user: User, conversation_id: Any) -> Conversation:
    """Return the user's conversation; raises NotFound for unknown or others' ids."""
    try:
        return Conversation.objects.get(id=_as_uuid(conversation_id), user=user)
    except Conversation.DoesNotExist as exc:
        raise NotFound("This conversation does not exist.") from exc


def message_get(*, user: User, conversation_id: Any, message_id: Any) -> Message:
    """Return a message of the user's conversation; raises NotFound otherwise."""
    try:
        return Message.objects.select_related("conversation").get(
            id=_as_uuid(message_id),
            conversation_id=_as_uuid(conversation_id),
            conversation__user=user,
        )
    except Message.DoesNotExist as exc:
        raise NotFound("This message does not exist.") from exc


@dataclass
class ToolRound:
    """An assistant message of an answer's chain that called tools (``message``, its
    text shown before its blocks when it has any) and one :class:`ToolStep` per call."""

    message: Message
    steps: list[ToolStep]


@dataclass
class ThreadItem:
    """A message as shown on the current branch, with its versions.

    ``versions`` are the messages with the same parent and role as ``head`` (the
    shown message itself, or for an answer that used tools the first message of its
    chain), oldest first: regenerated answers, or edited user messages. An answer's
    ``rounds`` are the tool calls of its chain before it, in order (empty without
    tools); when the chain ended without an answer (stopped, or tools still running),
    ``message`` is its last assistant message and is one of the rounds.
    """

    message: Message
    versions: list[Message] = field(default_factory=list)
    # the conversation owner's thumbs on ``message`` ("up" / "down"; "" = none)
    rating: str = ""
    # an answer cut by output moderation whose cut the owner has appealed
    appealed: bool = False
    head: Message | None = None
    rounds: list[ToolRound] = field(default_factory=list)
    # the chain's tool step runs now: the page follows the stream of ``message``
    tools_running: bool = False

    @property
    def version_count(self) -> int:
        """How many versions this message has (1 = never regenerated or edited)."""
        return max(1, len(self.versions))

    @property
    def version_index(self) -> int:
        """The shown message's 1-based position among its versions ("2" of "2/3")."""
        ids = [v.id for v in self.versions]
        head = self.head or self.message
        return ids.index(head.id) + 1 if head.id in ids else 1

    @property
    def ends_in_calls(self) -> bool:
        """True when the shown message is itself a round of tool calls (no answer)."""
        return bool(self.message.tool_calls)

    @property
    def previous_version(self) -> Message | None:
        """The version before the shown one, or None for the first."""
        i = self.version_index
        return self.versions[i - 2] if i > 1 else None

    @property
    def next_version(self) -> Message | None:
        """The version after the shown one, or None for the last."""
        i = self.version_index
        return self.versions[i] if i < len(self.versions) else None


class MessageTree:
    """A conversation's messages as a tree, built in Python from one query.

    ``children`` maps a parent id (None for first messages) to its children, oldest
    first; messages whose parent is missing count as roots.
    """

    def __init__(self, messages: list[Message]) -> None:
        """Index ``messages`` (any order; sorted here by ``created_at``, then id)."""
        ordered = sorted(messages, key=lambda m: (m.created_at, str(m.id)))
        self.by_id: dict[Any, Message] = {m.id: m for m in ordered}
        self.children: dict[Any, list[Message]] = {}
        for m in ordered:
            parent = m.parent_id if m.parent_id in self.by_id else None
            self.children.setdefault(parent, []).append(m)

    def path_to(self, message_id: Any) -> list[Message]:
        """Return the messages from the root down to ``message_id`` (inclusive);
        empty for an unknown id."""
        path: list[Message] = []
        seen: set[Any] = set()
        node = self.by_id.get(message_id)
        while node is not None and node.id not in seen:
            seen.add(node.id)
            path.append(node)
            node = self.by_id.get(node.parent_id)
        path.reverse()
        return path

    def newest_leaf(self, message_id: Any = None) -> Message | None:
        """Return the leaf reached from ``message_id`` by always taking the newest
        child (from the newest root when None); None in an empty tree."""
        node = self.by_id.get(message_id) if message_id is not None else None
        if node is None:
            roots = self.children.get(None, [])
            if not roots:
                return None
            node = roots[-1]
        while self.children.get(node.id):
            node = self.children[node.id][-1]
        return node

    def versions(self, message: Message) -> list[Message]:
        """Return the messages with ``message``'s parent and role, oldest first."""
        parent = message.parent_id if message.parent_id in self.by_id else None
        return [m for m in self.children.get(parent, []) if m.role == message.role]

    def current_path(self, conversation: Conversation) -> list[Message]:
        """Return the branch shown: root to ``conversation.current_leaf`` (or to the
        newest leaf when that is unset or not a message of this tree)."""
        leaf_id = conversation.current_leaf_id
        if leaf_id not in self.by_id:
            leaf = self.newest_leaf()
            leaf_id = leaf.id if leaf is not None else None
        return self.path_to(leaf_id)


def message_tree(*, conversation: Conversation) -> MessageTree:
    """Return the conversation's :class:`MessageTree` (one query)."""
    return MessageTree(list(conversation.messages.all()))


def thread_leaf(*, conversation: Conversation) -> Message | None:
    """Return the last message of the current branch (None in an empty conversation):
    the parent of the next user message."""
    path = message_tree(conversation=conversation).current_path(conversation)
    return path[-1] if path else None


def _tool_rounds(chain: list[Message], *, upto: int) -> list[ToolRound]:
    """Return the rounds of tool calls among ``chain[:upto]`` (an answer's chain:
    assistant and tool messages), each call with the result stored for it."""
    rounds: list[ToolRound] = []
    for i, m in enumerate(chain[:upto]):
        if m.role != Message.Role.ASSISTANT or not m.tool_calls:
            continue
        results: dict[str, Message] = {}
        for r in chain[i + 1 :]:
            if r.role != Message.Role.TOOL:
                break
            results.setdefault(r.tool_call_id, r)
        steps = [
            ToolStep(message=m, index=k, result=results.get(call["id"]))
            for k, call in enumerate(m.tool_calls)
        ]
        rounds.append(ToolRound(message=m, steps=steps))
    return rounds


def _shown(path: list[Message]) -> list[tuple[Message, Message, list[ToolRound]]]:
    """Return the branch ``path`` as shown: ``(message, head, rounds)`` per user
    message and per answer, an answer's chain of tool calls folded into it."""
    shown: list[tuple[Message, Message, list[ToolRound]]] = []
    i = 0
    while i < len(path):
        m = path[i]
        if m.role == Message.Role.USER:
            shown.append((m, m, []))
            i += 1
            continue
        j = i
        while j < len(path) and path[j].role != Message.Role.USER:
            j += 1
        chain = [x for x in path[i:j] if x.role != Message.Role.SYSTEM]
        i = j
        answers = [k for k, x in enumerate(chain) if x.role == Message.Role.ASSISTANT]
        if not answers:
            continue  # tool results without a call: nothing to show them under
        last = answers[-1]
        answer = chain[last]
        rounds = _tool_rounds(chain, upto=last + 1 if answer.tool_calls else last)
        shown.append((answer, chain[answers[0]], rounds))
    return shown


def answer_job_id(*, user: User, message_id: Any) -> str:
    """The job id of the latest generation of the user's answer ``message_id`` (its
    own id, or its ``job`` once continued): what moderation events refer to.
    ``message_id`` itself (as text) when it is no answer of the user's."""
    job = (
        Message.objects.filter(id=message_id, conversation__user=user)
        .values_list("job", flat=True)
        .first()
    )
    return str(job or message_id)


def thread_items(
    *, conversation: Conversation, through: Any = None
) -> list[ThreadItem]:
    """Return the current branch in order, each message with its versions.

    ``through`` (a message id of the conversation): the branch through that message
    instead, down to its newest leaf, only read (viewing it stores nothing; the
    stored current branch stays). Raises NotFound for an id not in the conversation.

    An answer that used tools is one item: its chain's tool calls and results are
    its ``rounds`` and its versions are those of the chain's first message (what a
    regenerate replaces). Three queries whatever the length: messages, their
    citations, the ratings; a fourth, the appeals, when an answer on the branch was
    cut by output moderation.
    """
    citations = Prefetch(
        "citations",
        queryset=Citation.objects.select_related("chunk__document").only(
            "number", "message_id", "chunk__ord", "chunk__document__title"
        ),
    )
    tree = MessageTree(list(conversation.messages.prefetch_related(citations)))
    ratings = dict(
        Feedback.objects.filter(
            user_id=conversation.user_id, message__conversation=conversation
        ).values_list("message_id", "rating")
    )
    if through is None:
        path = tree.current_path(conversation)
    else:
        leaf = tree.newest_leaf(through) if tree.path_to(through) else None
        if leaf is None:
            raise NotFound("This message does not exist.")
        path = tree.path_to(leaf.id)
    shown = _shown(path)
    # a cut is recorded under the answer's latest generation (its id, or its
    # ``job`` once continued)
    cut = [m.job_id for m, _, _ in shown if m.status == Message.Status.FILTERED]
    appealed = (
        safety_selectors.appealed_answers(user_id=conversation.user_id, job_ids=cut)
        if cut
        else set()
    )
    items = [
        ThreadItem(
            message=m,
            versions=tree.versions(head),
            rating=ratings.get(m.id, ""),
            appealed=m.job_id in appealed,
            head=head,
            rounds=rounds,
        )
        for m, head, rounds in shown
    ]
    if items and items[-1].message.tool_calls:
        # the branch ends at a tool step: running, unless the turn ended there
        items[-1].tools_running = tool_running(conversation_id=conversation.pk)
    return items


# The Redis key that marks a tool step running in a conversation (its value: the
# calling message's id; set and cleared by the tool loop).
tool_busy_key = keys.tool_busy_key


def tool_running(*, conversation_id: Any) -> bool:
    """Whether a tool step runs in ``conversation_id`` (one Redis read)."""
    return bool(redis_sync().exists(tool_busy_key(conversation_id)))


def conversation_scope_ids(*, conversation: Conversation) -> list[int]:
    """Return the ids of the documents chosen for ``conversation``'s document scope
    (meaningful when its ``doc_scope`` is "some"), ascending."""
    return sorted(conversation.scope_documents.values_list("id", flat=True))

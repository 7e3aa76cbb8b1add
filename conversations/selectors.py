"""Reads of conversations and messages, always scoped to the owner (CONVENTIONS §1)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Count, Prefetch, Q, QuerySet
from django.db.models.functions import TruncDate

from chatsite.errors import NotFound
from conversations.models import Conversation, Feedback, Message
from conversations.tool_steps import ToolStep, openai_tool_calls
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


def tool_steps_get(
    *, user: User, conversation_id: Any, message_id: Any, running: bool = False
) -> list[ToolStep]:
    """Return the steps of the assistant message ``message_id``'s tool calls, in call
    order, each with the result stored for it (None while it has none; ``running``
    marks those as still running). For the page's live blocks
    (:func:`conversations.rendering.tool_step_html`). Two queries. Raises NotFound
    (not the user's conversation or message); an answer without calls has no steps.
    """
    message = message_get(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    if message.role != Message.Role.ASSISTANT or not message.tool_calls:
        return []
    ids = [c["id"] for c in message.tool_calls]
    rows = Message.objects.filter(
        conversation_id=message.conversation_id,
        role=Message.Role.TOOL,
        tool_call_id__in=ids,
    )
    # only the results of this message's own chain (another chain may reuse an id)
    chain: dict[str, Message] = {}
    node: Any = message.id
    by_parent = {r.parent_id: r for r in rows}
    while node in by_parent and len(chain) < len(ids):
        r = by_parent[node]
        chain[r.tool_call_id] = r
        node = r.id
    return [
        ToolStep(message=message, index=k, result=chain.get(i), running=running)
        for k, i in enumerate(ids)
    ]


def thread_items(*, conversation: Conversation) -> list[ThreadItem]:
    """Return the current branch in order, each message with its versions.

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
    shown = _shown(tree.current_path(conversation))
    cut = [str(m.id) for m, _, _ in shown if m.status == Message.Status.FILTERED]
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
            appealed=str(m.id) in appealed,
            head=head,
            rounds=rounds,
        )
        for m, head, rounds in shown
    ]
    if items and items[-1].message.tool_calls:
        # the branch ends at a tool step: running, unless the turn ended there
        items[-1].tools_running = tool_running(conversation_id=conversation.pk)
    return items


def tool_busy_key(conversation_id: Any) -> str:
    """The Redis key that marks a tool step running in ``conversation_id`` (its
    value: the calling message's id; set and cleared by the tool loop)."""
    return f"chat:toolbusy:{conversation_id}"


def tool_running(*, conversation_id: Any) -> bool:
    """Whether a tool step runs in ``conversation_id`` (one Redis read)."""
    return bool(redis_sync().exists(tool_busy_key(conversation_id)))


def _usable(m: Message) -> bool:
    """An assistant message the model may see: it did not fail and is not streaming."""
    return m.status not in (Message.Status.STREAMING, Message.Status.ERROR)


def _promptable(messages: list[Message], *, asked: Any = None) -> list[Message]:
    """Keep what a prompt may hold of the branch ``messages``, in order.

    User messages and answers with text that did not fail or still stream (the model
    should not see an empty or failed reply); a round of tool calls only whole: the
    calling message with exactly one result per call right after it (never a call
    without its result nor a result without its call: a round the loop did not finish
    is left out). Messages flagged by moderation at import (``moderation_category``)
    are left out, and with them their whole round, except ``asked``, the id of the
    question a turn answers (admission screens it under the policies in force).
    """
    kept: list[Message] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        i += 1
        flagged = bool(m.moderation_category) and m.id != asked
        if m.role == Message.Role.USER:
            if not flagged:
                kept.append(m)
        elif m.role == Message.Role.ASSISTANT and m.tool_calls:
            results: list[Message] = []
            while i < len(messages) and messages[i].role == Message.Role.TOOL:
                results.append(messages[i])
                i += 1
            whole = sorted(r.tool_call_id for r in results) == sorted(
                c["id"] for c in m.tool_calls
            )
            if (
                whole
                and not flagged
                and _usable(m)
                and not any(r.moderation_category for r in results)
            ):
                kept += [m, *results]
        elif m.role == Message.Role.ASSISTANT:
            if not flagged and _usable(m) and m.content:
                kept.append(m)
        # system messages, and tool results not right after their call: left out
    return kept


def prompt_message(m: Message) -> dict[str, Any]:
    """Return a stored message as an OpenAI chat message: ``{"role", "content"}``;
    an assistant's calls as ``tool_calls`` (:func:`conversations.tool_steps.
    openai_tool_calls`, arguments exactly as generated); a tool result as ``{"role":
    "tool", "tool_call_id", "name", "content"}`` (raw: :func:`memory.context.
    context_build` quotes it as data and drops ``name`` before the engine sees it)."""
    if m.role == Message.Role.TOOL:
        return {
            "role": "tool",
            "tool_call_id": m.tool_call_id,
            "name": m.tool_name,
            "content": m.content,
        }
    if m.role == Message.Role.ASSISTANT and m.tool_calls:
        return {
            "role": "assistant",
            "content": m.content,
            "tool_calls": openai_tool_calls(m.tool_calls),
        }
    return {"role": m.role, "content": m.content}


def context_messages(
    *, conversation: Conversation, upto: Message | None = None
) -> list[Message]:
    """Return the messages a prompt may hold, oldest first: the path from the root to
    ``upto`` (inclusive), or the current branch when ``upto`` is None.

    Answers that ended in an error or are still streaming are left out; rounds of tool
    calls are kept only whole (see :func:`_promptable`).
    """
    tree = message_tree(conversation=conversation)
    if upto is None:
        return _promptable(tree.current_path(conversation))
    return _promptable(tree.path_to(upto.id))


def history_and_summary(
    *, conversation: Conversation, upto: Message | None
) -> tuple[list[dict[str, Any]], str, int]:
    """Return ``(history, summary, covers)`` for a prompt that continues after ``upto``.

    ``history`` is the path from the root to ``upto`` (inclusive; empty when None)
    as OpenAI chat messages (:func:`prompt_message`), failed and streaming answers
    left out, rounds of tool calls kept only whole. ``upto`` may be the last tool
    result of a turn's chain: the history then ends with the question and the
    chain so far, for the turn's next step. ``summary`` is the
    conversation's rolling summary, used only when its ``summary_upto`` lies on that
    path (it summarises a linear prefix; another branch's summary would leak that
    branch), and ``covers`` how many leading history messages it summarises (0
    without a summary).
    """
    path = message_tree(conversation=conversation).path_to(upto.id) if upto else []
    # a regenerate answers ``upto`` itself, the next step of a tool chain the question
    # above it: a question flagged at import is kept for admission to screen; a new
    # message follows ``upto`` (an answer), never kept so
    asked = None
    if upto is not None and upto.role in (Message.Role.USER, Message.Role.TOOL):
        users = [m.id for m in path if m.role == Message.Role.USER]
        asked = users[-1] if users else None
    messages = _promptable(path, asked=asked)
    upto_id = conversation.summary_upto_id
    on_path = [m.created_at for m in path if m.id == upto_id]
    covers = 0
    summary = ""
    if on_path:
        summary = conversation.summary
        covers = sum(1 for m in messages if m.created_at <= on_path[0])
    history = [prompt_message(m) for m in messages]
    return history, summary, covers


def chain_next(*, message: Message) -> Message | None:
    """Return the answer that continues the tool chain of ``message`` (an assistant
    message that called tools): the newest assistant child of its last result, or
    None (no result yet, or the turn ended there). Two queries."""
    ids = [c["id"] for c in message.tool_calls or []]
    if not ids:
        return None
    by_parent = {
        r.parent_id: r.id
        for r in Message.objects.filter(
            conversation_id=message.conversation_id,
            role=Message.Role.TOOL,
            tool_call_id__in=ids,
        )
    }
    node = message.id
    while node in by_parent:
        node = by_parent[node]
    if node == message.id:
        return None
    return (
        Message.objects.select_related("conversation")
        .filter(parent_id=node, role=Message.Role.ASSISTANT)
        .order_by("-created_at")
        .first()
    )


def answer_question(*, answer: Message) -> Message | None:
    """Return the user message ``answer`` answers: its parent, or for the last answer
    of a tool chain the user message above the chain (None if there is none). One
    query, two for a chain."""
    if answer.parent_id is None:
        return None
    parent = Message.objects.filter(id=answer.parent_id).first()
    if parent is None or parent.role == Message.Role.USER:
        return parent
    path = message_tree(conversation=answer.conversation).path_to(answer.id)
    users = [m for m in path if m.role == Message.Role.USER]
    return users[-1] if users else None


def feedback_satisfaction(
    *, start: dt.date | None = None, end: dt.date | None = None
) -> list[dict[str, Any]]:
    """Return per model and UTC day (newest first): ``up``, ``down``, ``total``
    ratings and ``share_up`` (0-1, thumbs up over all ratings), counted by the day a
    rating was last given. ``start``/``end`` (inclusive days) bound the range."""
    rows = Feedback.objects.all()
    if start is not None:
        rows = rows.filter(updated_at__date__gte=start)
    if end is not None:
        rows = rows.filter(updated_at__date__lte=end)
    grouped = (
        rows.annotate(day=TruncDate("updated_at", tzinfo=dt.UTC))
        .values("model", "day")
        .annotate(
            up=Count("id", filter=Q(rating=Feedback.Rating.UP)),
            down=Count("id", filter=Q(rating=Feedback.Rating.DOWN)),
            total=Count("id"),
        )
        .order_by("-day", "model")
    )
    return [{**row, "share_up": row["up"] / row["total"]} for row in grouped]


def feedback_export(*, since: dt.datetime | None = None) -> QuerySet[Feedback]:
    """Return the feedback given (or last changed) since ``since``, oldest first, with
    its message, the question it answers and the conversation loaded."""
    rows = Feedback.objects.select_related(
        "message", "message__parent", "message__conversation", "user"
    ).order_by("updated_at", "id")
    if since is not None:
        rows = rows.filter(updated_at__gte=since)
    return rows


def conversation_scope_ids(*, conversation: Conversation) -> list[int]:
    """Return the ids of the documents chosen for ``conversation``'s document scope
    (meaningful when its ``doc_scope`` is "some"), ascending."""
    return sorted(conversation.scope_documents.values_list("id", flat=True))

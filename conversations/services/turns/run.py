"""The chat turn's services: send a message, regenerate an answer, stop one.

:func:`turn_run` takes a turn through its steps, in this order:

1. read the user's preferences (default model, cache opt-in) and the scope in force;
2. build the prompt (:func:`.prompt.prompt_build`: memory and retrieval, no lock held);
3. describe the generation (:func:`.prompt.generation_request`);
4. start it through the gateway's one lifecycle
   (:func:`gateway.generations.generation_start`): admission reserves the tokens, then
5. store the rows (:func:`.rows.rows_store`) in its short transaction (the
   conversation row locked only for that; a plain first message, one statement, needs
   none: :func:`.rows.rows_one_statement`); the job is submitted after commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User

from chatsite.errors import Conflict, InvalidInput, ModerationBlocked
from conversations import selectors
from conversations.models import Message
from conversations.services.scope import scope_parse
from conversations.services.text import validate_content
from conversations.services.turns import tools
from conversations.services.turns.prompt import (
    generation_params,
    generation_request,
    prompt_build,
    scope_in_force,
)
from conversations.services.turns.request import Turn, TurnRequest
from conversations.services.turns.rows import (
    idle_check,
    rows_one_statement,
    rows_store,
)
from conversations.turn_selectors import turn_reads
from gateway import generations
from gateway import selectors as gateway_selectors
from inference import protocol
from inference.embeddings import TextVector


def turn_run(
    turn: TurnRequest, *, params: dict[str, Any] | None, model: str | None
) -> Turn:
    """Build the prompt of ``turn``, then start its generation; the rows are stored
    inside the lifecycle's short transaction (nothing but these writes under the lock).

    The new answer becomes the conversation's current leaf. ``params``: sampling
    parameters over the chat's defaults; no ``model``: the user's default model
    (Settings), if they chose one. Raises what :func:`turn_start` raises.
    """
    # one query: the user's preferences (default model, cache opt-in) and memory
    reads = turn_reads(user=turn.user)
    preference = reads.preference
    model = model or gateway_selectors.default_model(
        user=turn.user, preference=preference
    )
    sampling = generation_params(params)
    scope = turn.scope if turn.scope is not None else scope_in_force(turn.conversation)
    # The question is embedded at most once, on first need, for everyone who needs it.
    query = TextVector(turn.text)
    # a continuation writes on text: no tools offered
    withdrawn = turn.tools_withdrawn or turn.continues is not None
    if not settings.CHAT_TOOLS_AUTO and turn.tool is None and turn.last is None:
        withdrawn = True  # tools only for a picked tool and its chain's steps
    offered = [] if withdrawn else tools.tools_definitions(user=turn.user)
    if turn.tool is not None:
        tool_pick_check(turn.tool, offered)
    built = prompt_build(
        turn,
        scope=scope,
        max_tokens=int(sampling["max_tokens"]),
        query=query,
        tools=offered,
        sources=reads.memory_sources,
    )
    request = generation_request(
        turn,
        built,
        params=sampling,
        model=model,
        query=query,
        opt_in=preference.reuse_cached_answers,
        tools=offered,
        forced_tool=turn.tool,
    )

    def store(admission: generations.Admission) -> Turn:
        stored = rows_store(turn, admission, built=built, scope=scope)
        if offered:  # its tool steps' continuations answer with the same parameters
            # kept before the job is submitted (on commit): before any step can run
            tools.turn_params_keep(
                message_id=stored.assistant_message.id, params=params
            )
        return stored

    # a plain first message is one INSERT: no BEGIN and COMMIT around it; the tool
    # parameters kept with the rows need the transaction (undone if keeping fails)
    started = generations.generation_start(
        request,
        store=store,
        store_atomic=bool(offered)
        or not rows_one_statement(turn, built=built, scope=scope),
    )
    assert started.stored is not None
    return started.stored


def tool_pick_check(name: Any, offered: list[dict[str, Any]]) -> None:
    """Raise InvalidInput (400, ``tool_unavailable``) unless ``name``, the tool the
    user picked for a message, is among ``offered`` (OpenAI definitions: the tools
    staff allow for the user's plan that the user has on)."""
    names = {t["function"]["name"] for t in offered}
    if name not in names:
        shown = str(name)[:100]
        raise InvalidInput(
            f"The tool “{shown}” is not available to you: it is switched off, not "
            "in your plan, or unknown. Pick one from the Tools menu, or send the "
            "message without one.",
            code="tool_unavailable",
        )


def turn_start(
    *,
    user: User,
    content: Any,
    conversation_id: Any = None,
    after_id: Any = None,
    params: dict[str, Any] | None = None,
    model: str | None = None,
    doc_scope: Any = None,
    document_ids: Sequence[Any] = (),
    tool: str | None = None,
) -> Turn:
    """Store the user's message and a streaming answer; enqueue the generation.

    ``conversation_id`` None starts a new conversation titled after the message; in an
    existing one the message continues the current branch (its parent is the current
    leaf) and its answer becomes the leaf; ``after_id`` (an answer of the conversation,
    the last of a branch the user views without it being current, e.g. a search
    result's) continues that branch instead, which so becomes current. ``model`` is an
    explicit pool/model choice.
    ``doc_scope`` ("all"/"none"/"some", with ``document_ids`` for "some") sets the
    conversation's document scope with this message (:mod:`conversations.services.scope`);
    None keeps the one in force. ``tool`` names a tool the answer's first step must
    call (:func:`tool_pick_check`); its later steps choose freely. Raises
    InvalidInput (empty, a bad scope, a tool not offered to the user),
    PayloadTooLarge (over CHAT_MAX_MESSAGE_CHARS characters), NotFound (not the user's
    conversation, document or ``after_id`` message, unknown model), Conflict (an answer is still streaming), Forbidden
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
        idle_check(conversation)  # early: no prompt built for a busy thread
    scope = None
    if doc_scope is not None:
        scope = scope_parse(user=user, kind=doc_scope, document_ids=document_ids)
    after = None
    if conversation is not None:
        after = (
            selectors.thread_leaf(conversation=conversation)
            if after_id is None
            else _answer_followed(
                user=user, conversation=conversation, after_id=after_id
            )
        )
    turn = TurnRequest(
        user=user,
        conversation=conversation,
        content=content,
        after=after,
        scope=scope,
        tool=tool,
    )
    return turn_run(turn, params=params, model=model)


def _answer_followed(*, user: User, conversation: Any, after_id: Any) -> Message:
    """The answer ``after_id`` a new message follows: a finished assistant message of
    ``conversation`` that ends its turn (not one calling tools). Raises NotFound (not
    a message of the conversation) and InvalidInput (``bad_after``: anything else)."""
    after = selectors.message_get(
        user=user, conversation_id=conversation.id, message_id=after_id
    )
    if (
        after.role != Message.Role.ASSISTANT
        or after.status == Message.Status.STREAMING
        or after.tool_calls
    ):
        raise InvalidInput(
            "A message can only follow a finished answer.", code="bad_after"
        )
    return after


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
    versions stay, reachable with the version switcher. For an answer that used tools
    the question is the user message above its chain, and the new answer is a sibling
    of the chain's first message: it replaces the whole chain on its branch.

    Raises NotFound (not the user's conversation or message), InvalidInput
    (``message_id`` is not an answer), Conflict (an answer is streaming, or there is
    nothing to regenerate), and the gateway's errors as :func:`turn_start` does.
    """
    conversation = selectors.conversation_get(
        user=user, conversation_id=conversation_id
    )
    question: Message | None
    if message_id is not None:
        answer = selectors.message_get(
            user=user, conversation_id=conversation.id, message_id=message_id
        )
        if answer.role != Message.Role.ASSISTANT or answer.parent_id is None:
            raise InvalidInput(
                "Only an answer can be regenerated.", code="not_regenerable"
            )
        # the question the answer's chain (tool calls and results, if any) answers
        path = selectors.message_tree(conversation=conversation).path_to(answer.id)
        users = [m for m in path if m.role == Message.Role.USER]
        question = users[-1] if users else None
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
    if question.moderation_category:
        # flagged at import (never in a prompt): refused as it was then, no new event
        # and no strike, since the user typed nothing now
        raise ModerationBlocked(
            "This imported message goes against the content policy, so it cannot be "
            "answered. Write a new message instead.",
            category=question.moderation_category,
        )
    idle_check(conversation)
    turn = TurnRequest(user=user, conversation=conversation, question=question)
    return turn_run(turn, params=params, model=model)


def turn_continue(
    *,
    user: User,
    conversation_id: Any,
    message_id: Any,
    params: dict[str, Any] | None = None,
    model: str | None = None,
) -> Turn:
    """Write on an answer that was cut short ("Continue", as ChatGPT's "Continue
    generating"): one answer, one message, no new user message.

    The answer (``message_id``: cut at its length limit or stopped, with text, the
    last message of its branch) streams again under a new generation whose prompt is
    its history and then its own text as the start of the assistant's turn
    (:data:`inference.params.CONTINUE`); the new text and tokens are added to it when
    that generation settles, and its branch becomes current. Admission, quotas,
    billing (a usage record per generation) and output moderation (over the whole
    answer) are those of any turn; no tools are offered. Raises NotFound (not the
    user's conversation or message), InvalidInput (``not_continuable``: not an answer
    cut short), Conflict (an answer is streaming, or this one has a reply), and the
    gateway's errors as :func:`turn_start` does.
    """
    conversation = selectors.conversation_get(
        user=user, conversation_id=conversation_id
    )
    answer = selectors.message_get(
        user=user, conversation_id=conversation.id, message_id=message_id
    )
    cut_short = answer.finish_reason == protocol.FINISH_LENGTH or (
        answer.status == Message.Status.CANCELLED
    )
    if (
        answer.role != Message.Role.ASSISTANT
        or answer.status == Message.Status.STREAMING
        or answer.tool_calls
        or not answer.content.strip()
        or not cut_short
    ):
        raise InvalidInput(
            "Only an answer that was cut short or stopped can be continued.",
            code="not_continuable",
        )
    idle_check(conversation)
    path = selectors.message_tree(conversation=conversation).path_to(answer.id)
    users = [m for m in path if m.role == Message.Role.USER]
    if not users:
        raise InvalidInput(
            "This answer has no question to continue from.", code="not_continuable"
        )
    turn = TurnRequest(
        user=user, conversation=conversation, question=users[-1], continues=answer
    )
    return turn_run(turn, params=params, model=model)


def turn_stop(*, user: User, conversation_id: Any, message_id: Any) -> Message:
    """Ask the worker to stop a streaming answer; the partial text is kept as ``cancelled``.

    The answer is finalised when the worker's terminal event arrives (within a decode
    step). For an answer whose tool calls are running, the running tool is cancelled
    and the turn ends there, the chain so far kept (:func:`.tools.tool_step_stop`).
    Stopping an answer that already ended is a no-op. Raises NotFound.
    """
    message = selectors.message_get(
        user=user, conversation_id=conversation_id, message_id=message_id
    )
    if message.role != Message.Role.ASSISTANT:
        raise InvalidInput("Only an answer can be stopped.", code="not_stoppable")
    if message.status == Message.Status.STREAMING:
        generations.generation_cancel(job_id=message.job_id)
    elif message.tool_calls:
        # its tools are running: cancel them and end the turn (the chain is kept)
        tools.tool_step_stop(message_id=message.id)
    return message

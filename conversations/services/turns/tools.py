"""The chat's tool loop: model → tool calls → results → model, until an answer.

A generation of the chat that ends with ``finish_reason: "tool_calls"`` is settled like
any other (:class:`conversations.services.MessageRecorder`), its calls stored on its
answer message in the same transaction (the outcome's
:attr:`~gateway.generations.Outcome.tool_calls`); then :func:`tool_step_run` runs the step, as a
Celery task queued on commit (``conversations.tasks.tool_step``), so it goes on when
the browser leaves:

1. once per message (a Redis ``SET NX`` on :func:`step_key`), the conversation marked
   busy meanwhile (:func:`busy_key`: a new turn gets Conflict, as while an answer
   streams);
2. each call is run (:mod:`.tool_calls`) through the tool offered to the user (:func:`tools_offered`; an
   unknown or disabled tool, bad JSON arguments, a tool that fails or passes its
   wall-clock limit: an error result the model reads), screened
   (:func:`safety.documents.tool_results_screen`: a flagged result is replaced by a
   note) and appended as a ``tool`` message (:func:`conversations.services.tool_steps.
   tool_result_append`); the step's progress is kept in :func:`step_key` for the relay;
3. the next generation starts as the chain's continuation (:func:`.run.turn_run`
   with ``last`` the last result, and the turn's sampling parameters,
   :func:`turn_params`): its answer becomes the leaf, offered the same tools, except
   after CHAT_TOOL_MAX_STEPS rounds, when none are offered so the model answers. The user's quota is checked by its admission like any generation's.

Stop (:func:`tool_step_stop`) cancels the running tool (its task is cancelled: the
sandbox kills its process) and ends the turn with the chain so far kept.

The tools come from CHAT_TOOLS_PROVIDER, a dotted path to ``provider(*, user)``
returning the user's enabled tools, each with ``name``, ``description``,
``parameters`` (JSON Schema), ``timeout_s`` and ``async run(arguments, context)``
returning text or an object with ``content`` (and optionally ``truncated``,
``error``, ``label``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.utils.module_loading import import_string

from chatsite.errors import DomainError
from conversations import selectors, tool_selectors
from conversations.models import Message
from conversations.services.tool_steps import tool_result_append
from conversations.services.turns.tool_calls import (
    ToolContext,
    call_output,
    screened,
    stop_key,
    stopped_by_user,
)
from gateway import generations
from inference import keys
from inference.connections import redis_sync
from inference.protocol import FINISH_TOOL_CALLS

logger = logging.getLogger(__name__)

# states of a step (the value of step_key's "state")
STEP_RUNNING = "running"
STEP_NEXT = "next"  # the next generation started: "next" holds its message id
STEP_STOPPED = "stopped"  # the user stopped it: the turn ends here
STEP_FAILED = "failed"  # the next generation could not start: "error" says why
STEP_LIMIT = "limit"  # a round past CHAT_TOOL_MAX_STEPS: not run
STEP_ENDS = {STEP_NEXT, STEP_STOPPED, STEP_FAILED, STEP_LIMIT}


# The Redis key of the tool step of a calling message: a JSON object ``{"state",
# "done" (results stored), "call" (the index of the call running), "next" (message
# id), "error", "code"}``.
step_key = keys.tool_step_key


busy_key = selectors.tool_busy_key
tool_running = selectors.tool_running


# how long a turn's sampling parameters are kept for its tool steps, in seconds: past
# any generation's own length (the step's state lives CHAT_TOOL_STEP_TTL_S from then)
PARAMS_TTL_S = 24 * 3600


# The Redis key of the sampling parameters the turn of an answer was given (JSON),
# which its tool step's continuation uses too.
params_key = keys.tool_params_key


def turn_params_keep(*, message_id: Any, params: dict[str, Any] | None) -> None:
    """Keep ``params`` (a turn's sampling parameters over the chat's defaults) for the
    tool step of answer ``message_id``; nothing is kept for none."""
    if params:
        redis_sync().set(params_key(message_id), json.dumps(params), ex=PARAMS_TTL_S)


def turn_params(*, message_id: Any) -> dict[str, Any] | None:
    """Return the sampling parameters kept for answer ``message_id``'s turn, or None
    (the chat's defaults)."""
    raw = redis_sync().get(params_key(message_id))
    return json.loads(raw) if raw else None


def tools_offered(*, user: User) -> dict[str, Any]:
    """Return the tools offered to ``user`` by name (CHAT_TOOLS_PROVIDER; none when
    it is unset)."""
    if not settings.CHAT_TOOLS_PROVIDER:
        return {}
    provider = import_string(settings.CHAT_TOOLS_PROVIDER)
    return {t.name: t for t in provider(user=user)}


def tools_definitions(*, user: User) -> list[dict[str, Any]]:
    """Return the OpenAI ``tools`` definitions of the tools offered to ``user``."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            },
        }
        for t in tools_offered(user=user).values()
    ]


def outcome_calls(*, outcome: Any) -> list[dict[str, str]]:
    """The tool calls a settled generation made (its outcome's, OpenAI's shape), as
    stored on its message: ``[{"id", "name", "arguments"}]``. Empty unless it
    finished with ``tool_calls``."""
    if outcome.finish_reason != FINISH_TOOL_CALLS:
        return []
    return [
        {
            "id": str(c.get("id") or ""),
            "name": str(c["function"].get("name") or ""),
            "arguments": str(c["function"].get("arguments") or ""),
        }
        for c in outcome.tool_calls
    ]


def step_state(*, message_id: Any) -> dict[str, Any] | None:
    """Return the state of ``message_id``'s tool step (:func:`step_key`), or None
    when it never ran or its state expired."""
    raw = redis_sync().get(step_key(message_id))
    return json.loads(raw) if raw else None


def _state_set(message_id: Any, **state: Any) -> None:
    redis_sync().set(
        step_key(message_id), json.dumps(state), ex=settings.CHAT_TOOL_STEP_TTL_S
    )


def tool_step_claim(*, message: Message) -> bool:
    """Mark ``message``'s step as running and its conversation busy, once: False if
    it was claimed already. Called when the calling generation settles, so no new
    turn slips in before the step's task starts."""
    r = redis_sync()
    ttl = settings.CHAT_TOOL_STEP_TTL_S
    claimed = r.set(
        step_key(message.id),
        json.dumps({"state": STEP_RUNNING, "done": 0}),
        nx=True,
        ex=ttl,
    )
    if claimed:
        r.set(busy_key(message.conversation_id), str(message.id), ex=ttl)
    return bool(claimed)


def tool_step_stop(*, message_id: Any) -> None:
    """Ask the running tool step of ``message_id`` to stop; when its next generation
    has started already (the page did not hear of it yet), stop that one. A no-op
    when the step ended otherwise."""
    state = step_state(message_id=message_id)
    if state is None:
        return
    if state.get("state") == STEP_RUNNING:
        redis_sync().set(stop_key(message_id), "1", ex=settings.CHAT_TOOL_STEP_TTL_S)
    elif state.get("state") == STEP_NEXT and state.get("next"):
        generations.generation_cancel(job_id=str(state["next"]))


def _rounds(message: Message) -> int:
    """How many rounds of tool calls the turn of ``message`` made, its own included."""
    path = selectors.message_tree(conversation=message.conversation).path_to(message.id)
    rounds = 0
    for m in reversed(path):
        if m.role == Message.Role.USER:
            break
        if m.role == Message.Role.ASSISTANT and m.tool_calls:
            rounds += 1
    return rounds


def tool_step_run(*, message_id: Any) -> str:
    """Run the tool step of the settled calling message ``message_id`` and start the
    turn's next generation; return the step's end state (:data:`STEP_ENDS`, or
    "skipped" when the message calls no tools or another run holds the step).

    Idempotent: the step is claimed once (:func:`tool_step_claim`); the conversation
    is busy until the next generation is stored (or the step ends without one).
    """
    message = (
        Message.objects.select_related("conversation__user")
        .filter(id=message_id)
        .first()
    )
    if message is None or message.finish_reason != FINISH_TOOL_CALLS:
        return "skipped"
    if not message.tool_calls:
        return "skipped"
    state = step_state(message_id=message.id) or {}
    if state.get("state") in STEP_ENDS:
        return "skipped"
    if not state:
        tool_step_claim(message=message)
    r = redis_sync()
    # one runner: the claim marks the step, this lock who runs it
    if not r.set(
        keys.tool_step_run_key(message.id),
        "1",
        nx=True,
        ex=settings.CHAT_TOOL_STEP_TTL_S,
    ):
        return "skipped"
    conversation, user = message.conversation, message.conversation.user
    try:
        return _step(message, conversation_id=conversation.pk, user=user)
    except Exception:
        # the turn ends here, the chain so far kept; the relay's stream says so
        logger.exception("tool step of %s failed", message.id)
        _state_set(message.id, state=STEP_FAILED, done=0, error="")
        raise
    finally:
        r.delete(busy_key(conversation.pk), stop_key(message.id))


def _step(message: Message, *, conversation_id: Any, user: User) -> str:
    from conversations.services.turns.request import TurnRequest
    from conversations.services.turns.run import turn_run

    rounds = _rounds(message)
    if rounds > settings.CHAT_TOOL_MAX_STEPS:
        _state_set(message.id, state=STEP_LIMIT, done=0)
        return STEP_LIMIT
    offered = tools_offered(user=user)
    context = ToolContext(user.pk, str(conversation_id), str(message.id))
    done, last = 0, None
    for call in message.tool_calls:
        if stopped_by_user(message.id):
            _state_set(message.id, state=STEP_STOPPED, done=done)
            return STEP_STOPPED
        _state_set(message.id, state=STEP_RUNNING, done=done, call=done)
        output, stopped = call_output(call, offered, context)
        last = tool_result_append(
            user=user,
            conversation_id=conversation_id,
            message_id=message.id,
            output=output if stopped else screened(output),
        )
        done += 1
        if stopped:
            _state_set(message.id, state=STEP_STOPPED, done=done)
            return STEP_STOPPED
        _state_set(message.id, state=STEP_RUNNING, done=done)
    if stopped_by_user(message.id):
        _state_set(message.id, state=STEP_STOPPED, done=done)
        return STEP_STOPPED
    question = tool_selectors.answer_question(answer=message)
    if question is None or last is None:
        _state_set(message.id, state=STEP_FAILED, done=done, error="")
        return STEP_FAILED
    turn = TurnRequest(
        user=user,
        conversation=message.conversation,
        question=question,
        last=last,
        tools_withdrawn=rounds >= settings.CHAT_TOOL_MAX_STEPS,
    )
    try:
        # the turn's own sampling parameters, as its first generation had them
        params = turn_params(message_id=message.id)
        started = turn_run(turn, params=params, model=message.pool or None)
    except DomainError as exc:
        _state_set(
            message.id, state=STEP_FAILED, done=done, error=exc.message, code=exc.code
        )
        return STEP_FAILED
    _state_set(
        message.id, state=STEP_NEXT, done=done, next=str(started.assistant_message.id)
    )
    return STEP_NEXT

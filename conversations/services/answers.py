"""The chat's side of settling a generation: its answer message.

The gateway settles a generation once (:mod:`gateway.generations.settle`); the chat
gives it a :class:`MessageRecorder`, so the answer's final state (text, status, finish
reason, tokens, timings) is written in the same transaction as the usage record, by
a conditional UPDATE on ``status = streaming``: idempotent and race-free whoever
settles first (the SSE relay, or the reaper).
"""

from __future__ import annotations

import datetime as dt
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import (
    ExpressionWrapper,
    F,
    PositiveIntegerField,
    Q,
    TextField,
    Value,
)
from django.db.models.functions import Coalesce, Concat
from django.utils import timezone

from conversations import tool_selectors
from conversations.models import Conversation, Message
from conversations.services.turns import tools
from conversations.tool_steps import ToolStepProblem, calls_clean
from gateway import generations
from inference import protocol
from inference.protocol import FINISH_TOOL_CALLS
from memory import tasks as memory_tasks

# the type of the counts an UPDATE adds to (tokens, ms)
COUNT = PositiveIntegerField()


def message_generation(
    message: Message, *, user_id: int | None = None
) -> generations.Generation:
    """Return the gateway's handle of an answer's generation (its id is the job id).

    ``user_id`` is the conversation's owner (read from ``message.conversation`` when
    not given).
    """
    return generations.Generation(
        job_id=message.job_id,
        user_id=user_id if user_id is not None else message.conversation.user_id,
        pool=message.pool or settings.INFERENCE_DEFAULT_POOL,
        model=message.model,
        enqueued_at=message.enqueued_at,
        cache_kind=message.cache_kind,
        surface=generations.Surface.CHAT,
        # a continued answer: the text before this generation, which output
        # moderation reads first (it screens the whole answer)
        prefix=message.content if message.job else "",
    )


def answer_of(job_id: str) -> Q:
    """The filter of the answer that generation ``job_id`` writes: the message whose
    own id it is (never continued), or whose ``job`` it is (a continuation)."""
    return Q(id=job_id, job__isnull=True) | Q(job=job_id)


class MessageRecorder:
    """Stores a generation's outcome on its answer message (:class:`generations.Recorder`)."""

    def rerouted(self, *, job_id: str, pool: str) -> None:
        """The job moved to the fallback ``pool``: the answer records where it runs."""
        Message.objects.filter(
            answer_of(job_id), status=Message.Status.STREAMING
        ).update(pool=pool)

    def finalize(self, *, job_id: str, outcome: generations.Outcome) -> bool:
        """Write the answer's final state; False if it was final already.

        The generation's text and tokens are added to what the answer holds: nothing
        for a new answer (empty while it streams), the text before it for a continued
        one, which so grows in place (its first time to first token is kept).
        """
        fields: dict[str, Any] = {
            "content": Concat(
                F("content"), Value(outcome.text), output_field=TextField()
            ),
            "model": outcome.model,
            "status": outcome.status,
            "finish_reason": outcome.finish_reason,
            "token_count": _added("token_count", outcome.usage.completion_tokens),
            "prompt_tokens": _added("prompt_tokens", outcome.usage.prompt_tokens),
            "cached_tokens": _added("cached_tokens", outcome.usage.cached_tokens),
            "cache_kind": outcome.cache_kind,
            "ttft_ms": F("ttft_ms")
            if outcome.ttft_ms is None
            else Coalesce(F("ttft_ms"), Value(outcome.ttft_ms, output_field=COUNT)),
            "latency_ms": _added("latency_ms", outcome.latency_ms),
        }
        if outcome.error is not None:
            fields["error"] = outcome.error.message
        elif outcome.reason:  # why a filtered answer was cut: shown under it
            fields["error"] = outcome.reason
        calls = _calls_stored(job_id=job_id, outcome=outcome)
        if calls:
            fields["tool_calls"] = calls
        elif outcome.finish_reason == FINISH_TOOL_CALLS:
            fields["finish_reason"] = protocol.FINISH_STOP  # no call to run
        updated = Message.objects.filter(
            answer_of(job_id), status=Message.Status.STREAMING
        ).update(**fields)
        if not updated:
            return False
        if calls:
            # the turn goes on: its tool step runs once this commits (a tool chain's
            # step is never a continuation: the job id is the message's id)
            transaction.on_commit(lambda: _tool_step_queue(message_id=job_id))
        Conversation.objects.filter(
            messages__in=Message.objects.filter(answer_of(job_id))
        ).update(updated_at=timezone.now())
        if settings.CHAT_BACKGROUND_JOBS:
            transaction.on_commit(lambda: _after_answer(message_id=job_id))
        return True

    @staticmethod
    def finalize_many(
        items: list[tuple[MessageRecorder, str, generations.Outcome]],
    ) -> list[bool]:
        """:meth:`finalize` of many answers, ``[(recorder, job_id, outcome)]``, in the
        caller's transaction; returns, in order, whether each was finalised here.

        The answers of plain outcomes are written by one conditional UPDATE (the same
        writes as :meth:`finalize`'s), their conversations' ``updated_at`` by one
        more; an answer whose outcome holds tool calls goes through :meth:`finalize`.
        """
        done = [False] * len(items)
        plain: list[tuple[int, str, generations.Outcome]] = []
        for index, (recorder, job_id, outcome) in enumerate(items):
            if tools.outcome_calls(outcome=outcome):
                done[index] = recorder.finalize(job_id=job_id, outcome=outcome)
            else:
                plain.append((index, job_id, outcome))
        finalised = _answers_update(sorted(plain, key=lambda p: p[1]))
        for index, job_id, _outcome in plain:
            done[index] = job_id in finalised
        conversations = set(finalised.values())
        if conversations:
            Conversation.objects.filter(id__in=conversations).update(
                updated_at=timezone.now()
            )
        if settings.CHAT_BACKGROUND_JOBS:
            for job_id in finalised:
                transaction.on_commit(partial(_after_answer, message_id=job_id))
        return done


def _answers_update(
    plain: list[tuple[int, str, generations.Outcome]],
) -> dict[str, Any]:
    """Write the final state of the answers of ``plain`` (``(index, job_id,
    outcome)``, none with tool calls) in one UPDATE ... FROM (VALUES ...), on those
    still streaming; return ``{job_id: conversation id}`` of those written."""
    if not plain:
        return {}
    rows: list[str] = []
    params: list[Any] = []
    for _index, job_id, outcome in plain:
        rows.append(_ROW)
        finish = outcome.finish_reason
        if finish == FINISH_TOOL_CALLS:
            finish = protocol.FINISH_STOP  # no call to run
        error = None
        if outcome.error is not None:
            error = outcome.error.message
        elif outcome.reason:  # why a filtered answer was cut: shown under it
            error = outcome.reason
        usage = outcome.usage
        params += [
            job_id,
            outcome.text,
            outcome.model,
            outcome.status,
            finish,
            usage.completion_tokens,
            usage.prompt_tokens,
            usage.cached_tokens,
            outcome.cache_kind,
            outcome.ttft_ms,
            outcome.latency_ms,
            error,
        ]
    sql = _ANSWERS_UPDATE.format(table=Message._meta.db_table, rows=", ".join(rows))
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, Message.Status.STREAMING])
        return {str(job): conversation for job, conversation in cursor.fetchall()}


# One answer's values in _ANSWERS_UPDATE (typed: a NULL's type is not guessed)
_ROW = (
    "(%s::uuid, %s::text, %s::text, %s::text, %s::text, %s::int, %s::int, %s::int, "
    "%s::text, %s::int, %s::int, %s::text)"
)
# MessageRecorder.finalize's writes for many answers: the counts add to what a
# continued answer holds (a null count reads as 0), its first ttft_ms is kept
_ANSWERS_UPDATE = """
UPDATE {table} AS m SET
  content = m.content || v.text,
  model = v.model,
  status = v.status,
  finish_reason = v.finish_reason,
  token_count = COALESCE(m.token_count, 0) + v.completion,
  prompt_tokens = COALESCE(m.prompt_tokens, 0) + v.prompt,
  cached_tokens = COALESCE(m.cached_tokens, 0) + v.cached,
  cache_kind = v.cache_kind,
  ttft_ms = COALESCE(m.ttft_ms, v.ttft),
  latency_ms = CASE WHEN v.latency IS NULL THEN m.latency_ms
    ELSE COALESCE(m.latency_ms, 0) + v.latency END,
  error = COALESCE(v.error, m.error)
FROM (VALUES {rows}) AS v(job, text, model, status, finish_reason, completion,
  prompt, cached, cache_kind, ttft, latency, error)
WHERE ((m.id = v.job AND m.job IS NULL) OR m.job = v.job) AND m.status = %s
RETURNING v.job, m.conversation_id
"""


def _added(field: str, value: int | None) -> Any:
    """``field`` plus ``value`` (a count, in tokens or ms), for a conditional UPDATE:
    ``value`` alone where the field is null; the field as it is when ``value`` is."""
    if value is None:
        return F(field)
    return ExpressionWrapper(
        Coalesce(F(field), Value(0, output_field=COUNT))
        + Value(value, output_field=COUNT),
        output_field=COUNT,
    )


RECORDER = MessageRecorder()


def _calls_stored(*, job_id: str, outcome: generations.Outcome) -> list[dict[str, str]]:
    """The calls of a generation that ended with ``tool_calls``, cleaned as stored
    (:func:`conversations.tool_steps.calls_clean`); empty when there are none or they
    cannot be stored (the answer then ends as a plain answer)."""
    calls = tools.outcome_calls(outcome=outcome)
    if not calls:
        return []
    try:
        return calls_clean(
            calls, arguments_max_chars=settings.CHAT_IMPORT_MAX_MESSAGE_CHARS
        )
    except ToolStepProblem:
        return []


def _tool_step_queue(*, message_id: Any) -> None:
    """Claim the tool step of ``message_id`` (the conversation is busy from now) and
    queue it (``conversations.tasks.tool_step``)."""
    from conversations import tasks

    message = Message.objects.filter(id=message_id).first()
    if message is not None and tools.tool_step_claim(message=message):
        tasks.tool_step.delay(str(message_id))


def message_finalize(*, message_id: Any) -> Message | None:
    """Settle a streaming answer from its generation stream, if that has ended.

    Returns the updated message, or None if the generation has not ended, was retried
    on a fallback pool (the answer stays streaming), or the answer was already final.
    """
    message = (
        Message.objects.select_related("conversation")
        .filter(id=message_id, status=Message.Status.STREAMING)
        .first()
    )
    if message is None:
        return None
    settlement = generations.generation_settle(
        generation=message_generation(message),
        recorder=RECORDER,
        message_id=message.id,
    )
    if settlement.state != "settled":
        return None
    return Message.objects.select_related("conversation").get(id=message_id)


def streaming_messages_reap(*, older_than_s: float = 5.0) -> int:
    """Settle streaming answers nobody is relaying (web process died, tab closed).

    Each answer streaming for more than ``older_than_s`` seconds (its latest
    generation's, for a continued answer) goes through
    :func:`gateway.generations.generation_sweep` (settle if ended, else the watchdog,
    else lost after REAPER_STALE_AFTER_S). Returns how many were settled.
    """
    cutoff = timezone.now() - dt.timedelta(seconds=older_than_s)
    # a continued answer's generation started at ``job_enqueued_at``
    started_before = Q(job_enqueued_at__lt=cutoff) | Q(
        job_enqueued_at__isnull=True, created_at__lt=cutoff
    )
    done = 0
    for message in Message.objects.select_related("conversation").filter(
        started_before, status=Message.Status.STREAMING
    ):
        done += generations.generation_sweep(
            generation=message_generation(message),
            recorder=RECORDER,
            message_id=message.id,
        )
    return done


def _after_answer(*, message_id: Any) -> None:
    """Queue the background work of a finished answer (DESIGN §9): title the
    conversation after its first exchange, roll its summary, extract user facts.
    ``message_id``: the answer's id, or the job id of the generation that continued
    it last."""
    from conversations import tasks

    message = (
        Message.objects.select_related("conversation")
        .filter(Q(id=message_id) | Q(job=message_id))
        .first()
    )
    if message is None:
        return
    if message.finish_reason == FINISH_TOOL_CALLS:
        return  # a step of a tool chain: the turn goes on, its answer comes later
    conversation_id = str(message.conversation_id)
    tasks.title_conversation.delay(conversation_id)
    if message.status != Message.Status.COMPLETE:
        return
    tasks.summarize_conversation.delay(conversation_id)
    if settings.MEMORY_EXTRACT_FACTS and message.parent_id:
        question = tool_selectors.answer_question(answer=message)
        if question is not None:
            memory_tasks.extract_facts.delay(
                message.conversation.user_id,
                [
                    {"role": "user", "content": question.content},
                    {"role": "assistant", "content": message.content},
                ],
                str(question.id),
                settings.MEMORY_SMALL_POOL,
            )

"""Writes of evaluation: execute runs through the gateway (sets are imported by
:mod:`evaluation.importing`, runs created by :mod:`evaluation.runs`).

A run sends every case (× ``repeat``) through the gateway's one generation lifecycle
(:func:`gateway.generations.generation_start` then
:func:`~gateway.generations.generation_follow`, as the OpenAI-compatible API does), as
the service user EVAL_USERNAME on the plan EVAL_PLAN_NAME: input moderation, quotas,
billing and output moderation apply as to anyone. Bounds:

- at most EVAL_CONCURRENCY case runs in flight at once (an asyncio semaphore), so a
  run cannot take a pool's slots from its users;
- its pool is pinned (no fallback: the run measures that pool), and the eval plan is
  shed before every user (:func:`gateway.routing.pool_admit`, EVAL_SHED_FRACTION);
  a shed request (PoolSaturated, a retryable quota refusal, or a job no worker took
  before its queue timeout) waits and retries with exponential backoff — EVAL_RETRY_BASE_S doubling to 30 s — for up to
  EVAL_RETRY_MAX_S seconds, and only then is recorded as an error.

Execution is idempotent: a case run that already has a result is skipped, so a
retried Celery task finishes the rest.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import F
from django.utils import timezone

from chatsite.errors import (
    DomainError,
    ModerationBlocked,
    NotFound,
)
from evaluation import checks, runs
from evaluation.models import EvalCase, EvalResult, EvalRun
from gateway import generations
from gateway.models import UsageRecord

logger = logging.getLogger(__name__)

RETRY_CAP_S = 30.0


def _progress(run_id: int) -> None:
    EvalRun.objects.filter(pk=run_id).update(done=F("done") + 1)


@dataclass
class _Answer:
    text: str = ""
    finish_reason: str = ""
    error: str = ""
    refused: bool = False  # refused by input moderation before any model saw it
    pool: str = ""
    model: str = ""
    job_id: str = ""
    ttft_ms: int | None = None
    latency_ms: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 1


def _shed(exc: DomainError) -> bool:
    """True for a refusal that capacity coming back would lift (retry with backoff)."""
    return exc.code == "pool_saturated" or (exc.retryable and exc.status in (429, 503))


async def _follow(generation: generations.Generation) -> tuple[_Answer, bool]:
    """Read a generation to its end; return the answer and whether its failure is
    retryable (no worker took it in time: capacity, not the case, was the problem)."""
    clock = time.monotonic()
    parts: list[str] = []
    answer = _Answer(job_id=generation.job_id, pool=generation.pool)
    retryable = False
    async with aclosing(generations.generation_follow(generation)) as items:
        async for item in items:
            if isinstance(item, generations.Delta):
                parts.append(item.text)
            elif isinstance(item, generations.Broken):
                answer.error = f"{item.error.code}: {item.error.message}"
                break
            elif isinstance(item, generations.Ended):
                outcome = item.outcome
                answer.finish_reason = outcome.finish_reason
                answer.model = outcome.model or generation.model
                answer.ttft_ms = outcome.ttft_ms
                answer.prompt_tokens = outcome.usage.prompt_tokens
                answer.completion_tokens = outcome.usage.completion_tokens
                if outcome.error is not None:
                    answer.error = f"{outcome.error.code}: {outcome.error.message}"
                    retryable = outcome.error.retryable
                break
    answer.text = "".join(parts)
    answer.latency_ms = int((time.monotonic() - clock) * 1000)
    answer.pool = generation.pool
    return answer, retryable


async def _generate(
    *,
    user: User,
    pool: str,
    messages: list[dict[str, str]],
    params: dict[str, Any],
    sleep: Callable[[float], Any] = asyncio.sleep,
) -> _Answer:
    """One request through the gateway's lifecycle (start, then follow to its end),
    retried with backoff while it is shed at admission or times out in the queue."""
    start = sync_to_async(generations.generation_start)
    request = generations.GenerationRequest(
        user=user,
        messages=messages,
        params=params,
        surface=generations.Surface.API,
        model=pool,
        fallback=False,
    )
    deadline = time.monotonic() + settings.EVAL_RETRY_MAX_S
    delay = settings.EVAL_RETRY_BASE_S
    attempts = 0
    while True:
        attempts += 1
        try:
            started = await start(request)
        except DomainError as exc:
            if isinstance(exc, ModerationBlocked):
                return _Answer(
                    error=f"{exc.code}: {exc.message}", refused=True, attempts=attempts
                )
            if not _shed(exc) or time.monotonic() + delay > deadline:
                return _Answer(error=f"{exc.code}: {exc.message}", attempts=attempts)
        else:
            answer, retryable = await _follow(started.generation)
            answer.attempts = attempts
            if not retryable or time.monotonic() + delay > deadline:
                return answer
        # full jitter: concurrent case runs do not come back in step
        await sleep(random.uniform(delay / 2, delay))
        delay = min(delay * 2, RETRY_CAP_S)


def _case_messages(case: EvalCase) -> list[dict[str, str]]:
    system = [{"role": "system", "content": case.system_prompt}]
    return (system if case.system_prompt else []) + list(case.messages)


def _case_params(case: EvalCase) -> dict[str, Any]:
    params = dict(case.params or {})
    params.setdefault("max_tokens", settings.EVAL_MAX_TOKENS)
    params.pop("cache", None)  # an evaluation measures the model, never a cache
    return params


async def _judge(*, user: User, case: EvalCase, answer: str) -> checks.CheckResult:
    question = case.messages[-1]["content"]
    verdict = await _generate(
        user=user,
        pool=case.judge_pool,
        messages=checks.judge_prompt(
            rubric=case.rubric, question=question, answer=answer
        ),
        params={"max_tokens": 8, "temperature": 0},
    )
    if verdict.error:
        return checks.CheckResult("judge", False, f"judge failed: {verdict.error}")
    return checks.judge_verdict(verdict.text)


def _cost(record: UsageRecord | None) -> Decimal:
    return record.cost if record is not None else Decimal("0")


def _result_store(
    *,
    run: EvalRun,
    case: EvalCase,
    repeat_index: int,
    answer: _Answer,
    verdicts: list[checks.CheckResult],
    started_at: Any,
) -> EvalResult:
    record = (
        UsageRecord.objects.filter(job_id=answer.job_id).first()
        if answer.job_id
        else None
    )
    passed = not (answer.error and not answer.refused) and all(
        v.passed for v in verdicts
    )
    result, _ = EvalResult.objects.get_or_create(
        run=run,
        case=case,
        repeat_index=repeat_index,
        defaults={
            "output": answer.text,
            "finish_reason": answer.finish_reason,
            "check_results": [v.as_dict() for v in verdicts],
            "passed": passed,
            "error": answer.error,
            "pool": (record.pool if record else "") or answer.pool,
            "model": answer.model or (record.model if record else ""),
            "latency_ms": answer.latency_ms,
            "ttft_ms": answer.ttft_ms,
            "prompt_tokens": answer.prompt_tokens,
            "completion_tokens": answer.completion_tokens,
            "cost": _cost(record),
            "attempts": answer.attempts,
            "started_at": started_at,
            "finished_at": timezone.now(),
        },
    )
    _progress(run.pk)
    return result


async def _case_run(
    *,
    run: EvalRun,
    user: User,
    case: EvalCase,
    repeat_index: int,
    slots: asyncio.Semaphore,
) -> None:
    async with slots:
        started_at = timezone.now()
        answer = await _generate(
            user=user,
            pool=run.pool,
            messages=_case_messages(case),
            params=_case_params(case),
        )
        verdicts: list[checks.CheckResult] = []
        for check in case.checks:
            if check["type"] == "judge":
                verdicts.append(await _judge(user=user, case=case, answer=answer.text))
            elif answer.refused:
                # input moderation refused before any model answered: only the
                # refusal checks have something to judge
                kind = check["type"]
                ok = kind == "refusal_expected"
                verdicts.append(
                    checks.CheckResult(kind, ok, "" if ok else "refused at input")
                )
            else:
                verdicts.append(
                    checks.check_run(
                        check, answer.text, finish_reason=answer.finish_reason
                    )
                )
        await sync_to_async(_result_store)(
            run=run,
            case=case,
            repeat_index=repeat_index,
            answer=answer,
            verdicts=verdicts,
            started_at=started_at,
        )


async def _execute(run: EvalRun, user: User, todo: list[tuple[EvalCase, int]]) -> None:
    slots = asyncio.Semaphore(max(1, settings.EVAL_CONCURRENCY))
    async with asyncio.TaskGroup() as group:
        for case, repeat_index in todo:
            group.create_task(
                _case_run(
                    run=run,
                    user=user,
                    case=case,
                    repeat_index=repeat_index,
                    slots=slots,
                )
            )


def eval_run_execute(*, run_id: int) -> EvalRun:
    """Run every case of run ``run_id`` not yet run; return the finished run.

    Blocks until the last case run is settled (call it from a Celery task or a
    command, not from a request). A run already complete is returned as it is. On an
    unexpected failure the run is marked failed with the error and the exception is
    re-raised; a case whose request fails (refused, shed for longer than
    EVAL_RETRY_MAX_S, engine error) is recorded as an error and the run goes on.
    Raises NotFound for an unknown run.
    """
    try:
        run = EvalRun.objects.select_related("eval_set").get(pk=run_id)
    except EvalRun.DoesNotExist as exc:
        raise NotFound(f"No eval run {run_id}.") from exc
    if run.status == EvalRun.Status.COMPLETE:
        return run
    EvalRun.objects.filter(pk=run.pk).update(
        status=EvalRun.Status.RUNNING, started_at=run.started_at or timezone.now()
    )
    try:
        user = runs.eval_service_user()
        cases = list(run.eval_set.cases.all())
        have = set(run.results.values_list("case_id", "repeat_index"))
        todo = [
            (case, r)
            for r in range(run.repeat)
            for case in cases
            if (case.pk, r) not in have
        ]
        EvalRun.objects.filter(pk=run.pk).update(
            total=len(cases) * run.repeat, done=len(have)
        )
        # async_to_sync: the sync steps (admission, settlement) run back in this
        # thread, on its database connection, while the streams are followed
        # concurrently on the event loop
        async_to_sync(_execute)(run, user, todo)
    except BaseException as exc:
        EvalRun.objects.filter(pk=run.pk).update(
            status=EvalRun.Status.FAILED,
            finished_at=timezone.now(),
            error=f"{type(exc).__name__}: {exc}"[:2000],
        )
        raise
    EvalRun.objects.filter(pk=run.pk).update(
        status=EvalRun.Status.COMPLETE, finished_at=timezone.now(), error=""
    )
    run.refresh_from_db()
    return run

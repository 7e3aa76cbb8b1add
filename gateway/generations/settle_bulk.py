"""Settle the generations that end together in one transaction per batch.

A thousand answers ending in the same second each settle (:mod:`.settle`): their
relays' calls of :func:`asettle_retrying` come in bursts, and
:func:`chatsite.db_batch.db_bulk` hands each batch of them to
:func:`generations_settle_bulk`: the batch's streams read in one Redis round trip,
its answers finalised by one UPDATE per surface (the recorder's ``finalize_many``),
its usage records written by one multi-row INSERT, all in one transaction; then its
reservations settled in two pipelined Redis round trips
(:func:`gateway.quota.quota_settle_many`) and its cache material taken in one.

Exactly once, as :func:`.settle.generation_settle`: an answer is finalised by a
conditional UPDATE (``status = streaming``; a racing settler's row lock makes the
later one find it final) and the usage INSERT skips a job already recorded
(``ON CONFLICT (job_id) DO NOTHING``), so only the jobs whose record this batch
inserted move the quota. A generation the bulk path does not take (an engine error
before its first token: retried on the fallback pool; a recorder without
``finalize_many``; a second call for the same generation, from a second tab; a call
not made by :func:`asettle_retrying`) settles alone, after the batch, and
if the batch's transaction fails (any item's write) it is rolled back whole and
each of its generations settles alone: one item's failure neither loses nor
doubles another's settlement.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from chatsite.db_batch import call_alone, db_bulk
from gateway import cache, quota, selectors
from gateway.generations.outcome import Outcome
from gateway.generations.policy import PolicyChain
from gateway.generations.settle import (
    BACKEND_ERRORS,
    Recorder,
    Settlement,
    generation_settle,
    outcome_released,
    policies_settled,
    usage_cost,
)
from gateway.generations.start import Generation
from gateway.models import UsageRecord
from inference import client as inference_client
from inference import protocol

logger = logging.getLogger(__name__)

# a recorder's finalize for many: [(recorder, job_id, outcome)] -> finalised, in order
FinalizeMany = Callable[[list[tuple[Any, str, Outcome]]], list[bool]]


@dataclass
class _Item:
    """One generation of the batch that the bulk path settles."""

    index: int
    generation: Generation
    recorder: Recorder | None
    message_id: Any
    outcome: Outcome
    chain: PolicyChain | None
    generated: str
    settled: bool = False
    inserted: bool = False


Call = tuple[contextvars.Context, tuple, dict]


def generations_settle_bulk(calls: list[Call]) -> list[tuple[bool, Any]]:
    """Settle a batch of :func:`.settle.generation_settle` calls (keyword arguments
    ``generation``, ``recorder``, ``message_id``); answer each, in order, with
    ``(True, Settlement)`` or ``(False, exception)`` as that call would have.

    The generations still running answer ``running``; the others are settled
    together (see the module's docstring) or, those the bulk path does not take,
    alone. Raises nothing of its own.
    """
    results: list[tuple[bool, Any] | None] = [None] * len(calls)
    alone: list[int] = []
    items: list[_Item] = []
    try:
        streams = inference_client.generation_events_many(
            job_ids=[_kwargs(call)["generation"].job_id for call in calls]
        )
    except BACKEND_ERRORS:
        streams = None  # each call alone: each meets the failure and is retried
    jobs: set[str] = set()
    for index, call in enumerate(calls):
        item = None if streams is None else _take(index, call, streams[index])
        if isinstance(item, _Item) and item.generation.job_id not in jobs:
            jobs.add(item.generation.job_id)
            items.append(item)
        elif isinstance(item, _Item):  # followed twice (two tabs): after this batch
            alone.append(index)
        elif item is None:
            alone.append(index)
        else:
            results[index] = (True, item)
    if items:
        try:
            failure = _write(items)
        except Exception:  # noqa: BLE001 - rolled back whole: each settles alone
            logger.warning("a bulk settlement failed; its items settle alone")
            alone.extend(item.index for item in items)
        else:
            for item in items:
                state = "settled" if item.settled else "already"
                if failure is not None and item.inserted:
                    results[item.index] = (False, failure)
                else:
                    results[item.index] = (True, Settlement(state, item.outcome))
    for index in sorted(alone):
        context, args, kwargs = calls[index]
        results[index] = call_alone(generation_settle, context, args, kwargs)
    return [result for result in results if result is not None]


def _kwargs(call: Call) -> dict[str, Any]:
    return call[2]


def _take(
    index: int, call: Call, events: list[protocol.Event]
) -> _Item | Settlement | None:
    """The bulk path's item of ``call``; its Settlement if it is still running; None
    when it settles alone."""
    _context, args, kwargs = call
    if args or set(kwargs) != {"generation", "recorder", "message_id"}:
        return None
    generation: Generation = kwargs["generation"]
    recorder: Recorder | None = kwargs["recorder"]
    if not events or not events[-1].is_terminal:
        return Settlement("running")
    terminal = events[-1]
    if terminal.type == protocol.EVENT_ERROR and not any(
        e.type == protocol.EVENT_TOKEN for e in events
    ):
        return None  # the fallback retry's path
    if recorder is not None and _finalize_many(recorder) is None:
        return None
    try:
        outcome, chain, generated = outcome_released(generation, events)
    except Exception:  # noqa: BLE001 - a policy that fails: the path of one says so
        return None
    return _Item(
        index, generation, recorder, kwargs["message_id"], outcome, chain, generated
    )


def _finalize_many(recorder: Recorder) -> FinalizeMany | None:
    return getattr(type(recorder), "finalize_many", None)


def _write(items: list[_Item]) -> Exception | None:
    """Settle ``items`` in one transaction (their ``settled``/``inserted`` set); then
    settle their quota and caches. Returns the quota's failure (the jobs whose
    record was inserted then answer it, as a failing ``on_commit`` would make
    :func:`.settle.generation_settle` raise), else None. Raises what the
    transaction raises (nothing of it is then written)."""
    failures: list[Exception] = []
    with transaction.atomic():
        groups: dict[FinalizeMany, list[_Item]] = defaultdict(list)
        for item in items:
            if item.recorder is None:
                item.settled = True  # the API: settled if its record is new
            else:
                finalize = _finalize_many(item.recorder)
                assert finalize is not None
                groups[finalize].append(item)
        for finalize, group in groups.items():
            done = finalize(
                [(i.recorder, i.generation.job_id, i.outcome) for i in group]
            )
            for item, finalized in zip(group, done, strict=True):
                item.settled = finalized
        recorded = [item for item in items if item.settled]
        inserted = _usage_insert_many(recorded)
        for item in recorded:
            item.inserted = item.generation.job_id in inserted
            if item.recorder is None:
                item.settled = item.inserted
            if item.settled:
                policies_settled(
                    item.chain,
                    generation=item.generation,
                    outcome=item.outcome,
                    generated=item.generated,
                    chat=item.recorder is not None,
                    message_id=item.message_id,
                )
        new = [item for item in items if item.inserted]
        transaction.on_commit(lambda: _after_commit(new, failures))
    return failures[0] if failures else None


def _usage(item: _Item) -> protocol.Usage:
    """What is billed: nothing for an answer from a cache."""
    return protocol.Usage() if item.outcome.cache_kind else item.outcome.usage


def _usage_insert_many(items: list[_Item]) -> set[str]:
    """Insert the usage record of each of ``items`` (as :func:`.settle.usage_settle`
    does) in one statement, skipping a job already recorded; return the job ids
    whose record this inserted."""
    if not items:
        return set()
    columns = (
        "user_id, pool, model, prompt_tokens, completion_tokens, cached_tokens, "
        "cost, ttft_ms, latency_ms, cache_hit, status, job_id, message_id, created_at"
    )
    now = timezone.now()
    rows: list[str] = []
    params: list[Any] = []
    pools = selectors.gateway_config().pools  # once per batch (pool_get's snapshot)
    for item in sorted(items, key=lambda i: i.generation.job_id):  # lock order
        generation, outcome, usage = item.generation, item.outcome, _usage(item)
        pool = pools.get(generation.pool) if generation.pool else None
        rows.append("(" + ", ".join(["%s"] * 14) + ")")
        params += [
            generation.user_id,
            generation.pool,
            outcome.model or generation.model,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
            usage_cost(
                pool=pool,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
            ),
            outcome.ttft_ms,
            outcome.latency_ms,
            bool(outcome.cache_kind),
            outcome.status,
            generation.job_id,
            item.message_id,
            now,
        ]
    sql = (
        f"INSERT INTO {UsageRecord._meta.db_table} ({columns}) VALUES "
        + ", ".join(rows)
        + " ON CONFLICT (job_id) DO NOTHING RETURNING job_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}


def _after_commit(items: list[_Item], failures: list[Exception]) -> None:
    """Settle the quota of the jobs recorded (their failure goes to ``failures``),
    then store their answers in the caches (never raises)."""
    if not items:
        return
    try:
        quota.quota_settle_many(
            [
                (i.generation.user_id, i.generation.job_id, _usage(i).total_tokens)
                for i in items
            ]
        )
    except Exception as exc:  # noqa: BLE001 - answered to the calls it concerns
        failures.append(exc)
    try:
        pending = cache.cache_pending_take(job_ids=[i.generation.job_id for i in items])
    except Exception:  # noqa: BLE001 - the caches are best effort
        logger.exception("taking the cache material of %d jobs failed", len(items))
        return
    for item, material in zip(items, pending, strict=True):
        if material is None:
            continue
        outcome = item.outcome
        cache.cache_settle(
            job_id=item.generation.job_id,
            pool=item.generation.pool,
            status=outcome.status,
            finish_reason=outcome.finish_reason,
            answer=outcome.text,
            answer_model=outcome.model or item.generation.model,
            cache_hit=bool(outcome.cache_kind),
            usage=_usage(item),
            pending=material,
        )


# answers ending together settle in batches: one hand-off and transaction per batch
_settle_batched = db_bulk(generations_settle_bulk, generation_settle)


async def asettle_retrying(
    generation: Generation, recorder: Recorder | None, message_id: Any
) -> Settlement:
    """:func:`.settle.generation_settle` from the event loop (with the other
    generations ending at the same time, :func:`generations_settle_bulk`), retried
    while the database or Redis come back (a restart or failover takes seconds), for
    up to GATEWAY_SETTLE_RETRY_S seconds; then raises the last of
    :data:`.settle.BACKEND_ERRORS`."""
    deadline = time.monotonic() + settings.GATEWAY_SETTLE_RETRY_S
    delay = 0.1
    while True:
        try:
            return await _settle_batched(
                generation=generation, recorder=recorder, message_id=message_id
            )
        except BACKEND_ERRORS:
            if time.monotonic() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

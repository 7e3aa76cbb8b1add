"""Follow a generation: the only async reader of its Redis stream.

:func:`generation_follow` is what every streaming surface iterates — the chat's SSE
relay and the OpenAI-compatible API, streamed or not. It owns, in one place:

- the resume point (a Redis stream entry id; ``0-0`` from the start);
- the read: through the process's stream hub (:mod:`inference.streams`), one XREAD
  for every stream the process follows, not a Redis connection per stream;
- coalescing by time: the first token at once, then at most one :class:`Delta` per
  interval carries all tokens that arrived meanwhile (the interval is SSE_COALESCE_MS,
  longer with more streams followed, :func:`coalesce_interval_s`);
- the stream policies (:mod:`gateway.generations.policy`): a client only ever sees
  released text; a cut cancels the engine and the answer ends ``content_filter``;
- tool calls: each ``tool_call`` event is relayed as a :class:`ToolCall`, at once
  when no policy screens the stream or no text came before it; after screened text,
  once the policies released that text whole (at the end of the generation), so a
  call never overtakes text that may still be cut, and after a cut no call is
  relayed. The policies screen the answer's text, not a call's arguments: arguments
  are addressed to the client's program, not shown as the answer, and what a tool
  returns comes back as a ``tool`` message that input moderation screens;
- the watchdog (queue timeout, no live worker) while the stream is idle, on the
  event loop (no Redis call until a deadline passed; pool liveness is asked once per
  pool per second per process), and, for
  a surface that asks (``report_queue``), the job's place in its pool's queue while
  no worker has taken it yet (:class:`Queued`, about once a second);
- the fallback restart: an engine error before the first token moves the job to the
  fallback pool and the stream is read again from its start;
- the terminal event: the generation is settled (:mod:`gateway.generations.settle`)
  before :class:`Ended` is yielded, retrying while the database comes back;
- failures of Redis or the database mid-stream: one :class:`Broken` item with a clear,
  retryable error, never an exception that drops the connection;
- a consumer that leaves early: a *resumable* generation (the chat: a page reload
  re-attaches) is detached and cancelled after INFERENCE_DETACH_GRACE_S unless a
  client re-attaches; any other (the API) is cancelled at once and settled once
  (:mod:`gateway.generations.leave`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from chatsite.errors import ServiceUnavailable
from gateway import quota
from gateway.generations.items import (
    Broken,
    Delta,
    Ended,
    Idle,
    Item,
    Meta,
    Queued,
    ToolCall,
)
from gateway.generations.leave import generation_leave
from gateway.generations.policy import PolicyChain, policies_for
from gateway.generations.settle import BACKEND_ERRORS, Recorder, generation_watch
from gateway.generations.settle_bulk import asettle_retrying
from gateway.generations.start import Generation, generation_cancel
from inference import client as inference_client
from inference import jobs, protocol, streams, waiting

logger = logging.getLogger(__name__)

READ_BLOCK_MS = 1000


def _stream_broken(exc: BaseException) -> ServiceUnavailable:
    if isinstance(exc, ServiceUnavailable):
        return exc
    logger.warning("generation stream broken: %r", exc, exc_info=exc)
    return ServiceUnavailable(
        "The answer stream was interrupted (a backing service is unavailable). "
        "Please try again in a moment.",
        code="stream_interrupted",
        retry_after_s=1,
    )


def coalesce_interval_s(open_streams: int) -> float:
    """The time between two :class:`Delta` items of one stream (seconds) while the
    process follows ``open_streams`` streams: SSE_COALESCE_MS, or longer under load so
    the process releases about SSE_FRAMES_PER_S frames a second over all its streams,
    never more than SSE_COALESCE_MAX_MS (see the settings for the figures)."""
    return coalescing()(open_streams)


def coalescing() -> Callable[[int], float]:
    """:func:`coalesce_interval_s` with the settings read now: a follower reads them
    once, not per frame (each read of ``settings`` is a LazyObject lookup)."""
    floor_s = settings.SSE_COALESCE_MS / 1000
    budget = settings.SSE_FRAMES_PER_S
    max_s = settings.SSE_COALESCE_MAX_MS / 1000

    def interval_s(open_streams: int) -> float:
        shared_s = open_streams / budget if budget > 0 else 0.0
        return max(floor_s, min(shared_s, max_s))

    return interval_s


def _quota_settle_from(
    terminal: protocol.Event, generation: Generation, *, tokens_seen: int
) -> None:
    """Last resort when a generation cannot be recorded (the database stayed down):
    settle its reservation in Redis to what the generation spent
    (:func:`inference.jobs.usage_spent` of its ``terminal`` event and the
    ``tokens_seen`` token events this follower read), so no budget stays held."""
    spent = jobs.usage_spent(terminal, tokens=tokens_seen)
    billable = 0 if generation.cache_kind else spent.total_tokens
    quota.quota_settle(
        user_id=generation.user_id, job_id=generation.job_id, tokens=billable
    )


async def _policy_prime(chain: PolicyChain, generation: Generation, after: str) -> None:
    """Feed the policies the text a resuming client already saw (up to ``after``), so
    they hold and cut exactly as they did live."""
    events = await sync_to_async(inference_client.generation_events)(
        job_id=generation.job_id
    )
    after_key = tuple(int(p) for p in after.split("-"))
    seen = [
        e.data["t"]
        for e in events
        if e.type == protocol.EVENT_TOKEN
        and tuple(int(p) for p in e.id.split("-")) <= after_key
    ]
    if seen:
        await chain.afeed("".join(seen))


async def generation_follow(
    generation: Generation,
    *,
    after: str = protocol.STREAM_START,
    recorder: Recorder | None = None,
    message_id: Any = None,
    resumable: bool = False,
    report_queue: bool = False,
) -> AsyncGenerator[Item, None]:
    """Yield a generation's items after stream id ``after`` until it ends (see module).

    ``recorder`` stores the outcome on the surface's side (the chat's answer message);
    ``resumable`` True keeps the generation alive for INFERENCE_DETACH_GRACE_S when the
    consumer leaves; ``report_queue`` True adds a :class:`Queued` item after each
    :class:`Idle` until the first event (from one Redis call per pool and second for
    all followers of the process, none once the answer runs). Deltas come at most
    every :func:`coalesce_interval_s`, the first one at once. The last item is
    :class:`Ended` (settled) or :class:`Broken`.
    """
    job_id = generation.job_id
    chain = policies_for(job_id=job_id, user_id=generation.user_id)
    try:
        if resumable:
            await inference_client.astream_attach(job_id=job_id)
        if chain is not None and generation.prefix:
            await chain.aprime(generation.prefix)
        if chain is not None and after != protocol.STREAM_START:
            await _policy_prime(chain, generation, after)
    except BACKEND_ERRORS as exc:
        yield Broken(_stream_broken(exc))
        return
    started = after != protocol.STREAM_START
    last_event_at = time.time() if started else generation.enqueued_at
    tokens_seen, settled, cut = 0, False, bool(chain and chain.cut)
    held_calls: list[ToolCall] = []  # tool calls waiting for the text before them
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    next_delta_at = 0.0  # loop time before which no Delta is released
    hub = streams.stream_hub()
    interval_s = coalescing()
    subscription = hub.subscribe(job_id=job_id, after=after)
    try:
        while True:
            try:
                hold = next_delta_at - loop.time()
                if hold > 0:  # let the tokens of the next frame gather
                    subscription.due = next_delta_at  # nor need the hub read
                    await asyncio.sleep(hold)
                events = await subscription.next(timeout_s=READ_BLOCK_MS / 1000)
            except BACKEND_ERRORS as exc:
                yield Broken(_stream_broken(exc))
                return
            if task is not None and task.cancelling():
                # The consumer went away but something below absorbed the
                # CancelledError (redis-py did, releasing a pooled connection); the
                # task still counts the request, so honour it here.
                raise asyncio.CancelledError
            if not events:
                yield Idle()
                try:
                    if report_queue and not started and not generation.cache_kind:
                        position = await waiting.aqueue_position_shared(
                            pool=generation.pool, job_id=job_id
                        )
                        yield Queued(position)
                    await waiting.agen_watchdog(
                        generation_watch(generation),
                        started=started,
                        last_event_at=last_event_at,
                    )
                except BACKEND_ERRORS as exc:
                    yield Broken(_stream_broken(exc))
                    return
                continue
            started, last_event_at, after = True, time.time(), events[-1].id
            if chain is None and not cut and _all_tokens(events):
                # the common read (no policy screens the stream, only tokens): one
                # Delta of them all, as the general loop below releases them
                if len(events) == 1:  # a busy hub's read: the tokens come joined
                    text, tokens = events[0].data["t"], events[0].tokens
                else:
                    text = "".join([event.data["t"] for event in events])
                    tokens = sum([event.tokens for event in events])
                tokens_seen += tokens
                if text:
                    next_delta_at = loop.time() + interval_s(len(hub))
                    yield Delta(text, after, tokens)
                continue
            pending = _Pending()
            # None: the end of this read, where pending text is released too
            for event in [*events, None]:
                if event is not None and event.type == protocol.EVENT_TOKEN:
                    if not cut:
                        pending.add(event)
                    continue
                if pending:
                    try:
                        delta, cut_now = await pending.release(chain)
                    except BACKEND_ERRORS as exc:
                        yield Broken(_stream_broken(exc))
                        return
                    tokens_seen += pending.tokens
                    if delta is not None:
                        next_delta_at = loop.time() + interval_s(len(hub))
                        yield delta
                    if cut_now and not cut:
                        cut = True
                        await sync_to_async(generation_cancel)(job_id=job_id)
                    pending = _Pending()
                if event is None:
                    break
                if event.type == protocol.EVENT_META:
                    generation.model = event.data.get("model") or generation.model
                    yield Meta(event.data, event.id)
                    continue
                if event.type == protocol.EVENT_TOOL_CALL:
                    call = _tool_call(event)
                    if cut:
                        continue
                    if chain is None or not (tokens_seen or held_calls):
                        yield call
                    else:  # screened text came first: relayed once it is released
                        held_calls.append(call)
                    continue
                if not event.is_terminal:
                    continue
                if chain is not None and not cut:
                    try:
                        tail = await chain.afinish()
                    except BACKEND_ERRORS as exc:
                        yield Broken(_stream_broken(exc))
                        return
                    if tail.text:
                        yield Delta(tail.text, event.id)
                    if not chain.cut:
                        for call in held_calls:
                            yield call
                held_calls = []
                try:
                    settlement = await asettle_retrying(
                        generation, recorder, message_id
                    )
                except BACKEND_ERRORS as exc:
                    if recorder is None:
                        await sync_to_async(_quota_settle_from)(
                            event, generation, tokens_seen=tokens_seen
                        )
                    settled = True
                    yield Broken(_stream_broken(exc))
                    return
                if settlement.state in ("retried", "running"):
                    # failed before its first token and restarted on the fallback
                    # (by us, or by a concurrent settler): read it from its start
                    after, started = protocol.STREAM_START, False
                    held_calls = []
                    subscription.seek(after)
                    break
                settled = True
                assert settlement.outcome is not None  # settled or already
                yield Ended(settlement.outcome, event.id)
                return
    finally:
        subscription.close()
        if resumable and not settled:  # an ended generation has nothing to cancel
            try:
                await inference_client.astream_detach(
                    job_id=job_id, grace_s=settings.INFERENCE_DETACH_GRACE_S
                )
            except BACKEND_ERRORS:  # Redis is gone: the worker's own TTLs apply
                logger.warning("could not detach from generation %s", job_id)
        elif not settled:
            await generation_leave(
                generation, after=after, tokens_seen=tokens_seen, recorder=recorder
            )


def _all_tokens(events: list[protocol.Event]) -> bool:
    """Whether every event of a read is a ``token`` event."""
    for event in events:
        if event.type != protocol.EVENT_TOKEN:
            return False
    return True


def _tool_call(event: protocol.Event) -> ToolCall:
    """The :class:`ToolCall` item of a ``tool_call`` event."""
    return ToolCall(
        index=event.data["index"],
        arguments=event.data["arguments_delta"],
        event_id=event.id,
        id=event.data.get("id"),
        name=event.data.get("name"),
    )


@dataclass
class _Pending:
    """Token events of one read waiting to be released as one :class:`Delta`."""

    parts: list[str] = field(default_factory=list)
    event_id: str = ""
    tokens: int = 0

    def __bool__(self) -> bool:
        return bool(self.parts)

    def add(self, event: protocol.Event) -> None:
        self.parts.append(event.data["t"])
        self.event_id = event.id
        self.tokens += event.tokens

    async def release(self, chain: PolicyChain | None) -> tuple[Delta | None, bool]:
        text = "".join(self.parts)
        cut = False
        if chain is not None:
            decision = await chain.afeed(text)
            text, cut = decision.text, decision.cut
        delta = Delta(text, self.event_id, self.tokens) if text else None
        return delta, cut

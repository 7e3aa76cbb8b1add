"""The worker's side of a Redis outage: keep serving once Redis is back, lose nothing.

A base class of :class:`~inference.worker.Worker` (like
:class:`~inference.recovery.CrashRecovery`), so the worker module stays one job.

Two parts:

- reading jobs through a restart (:meth:`RedisOutageTolerance._take`);
- the stream journal: the worker keeps every entry it wrote to a running job's
  ``inf:gen`` stream (the ``meta`` event and each ``token``, with their entry ids).
  Redis without persistence comes back empty, so the entries written before a restart
  are gone; the next write finds the stream missing (XADD NOMKSTREAM) and writes them
  back first, under their original ids, in one transaction (protocol.py, "Lost
  streams"). A client that resumes with an old Last-Event-ID, the follower and the
  settlement then read the whole answer, as if Redis had never restarted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from inference import keys, protocol, redis_types

logger = logging.getLogger(__name__)

# How long the worker waits before reading again after Redis went away, s.
REDIS_RETRY_S = 0.5
# How long a running job waits for Redis to come back before it gives up, s: a
# restart of a Redis server (or a Sentinel failover) takes seconds.
REDIS_WRITE_WAIT_S = 30.0

# One entry a worker wrote to a generation stream: (entry id, fields).
JournalEntry = tuple[str, redis_types.RedisFields]


def group_gone(exc: Exception) -> bool:
    """Whether ``exc`` (a ResponseError of XREADGROUP) says the queue's consumer group
    is gone: ``NOGROUP`` (Redis came back empty) or ``UNBLOCKED`` (the stream was
    deleted while the read blocked on it: Redis 7 answers "UNBLOCKED the stream key
    no longer exists"). The worker recreates the group and reads again."""
    text = str(exc)
    return "NOGROUP" in text or "UNBLOCKED" in text


class RedisOutageTolerance:
    """Read jobs through Redis restarts; the subclass provides the attributes used."""

    worker_id: str
    pool: str
    block_ms: int
    stream_ttl_s: int
    # set at start and after a failed read: re-read this worker's own pending entries
    # (JobIntake._resume_pending) before the next new ones
    _pending_check: bool
    # job id -> the entries this worker wrote to its stream, oldest first
    _journals: dict[str, list[JournalEntry]]

    @property
    def redis(self) -> aioredis.Redis:  # pragma: no cover - the Worker's
        raise NotImplementedError

    async def _ensure_group(self) -> None:  # pragma: no cover - the Worker's
        raise NotImplementedError

    async def _take(self, count: int, queues: list[str], block_ms: int | None) -> Any:
        """Read up to ``count`` new jobs of each of ``queues`` (XREADGROUP, waiting up to
        ``block_ms``; None: no wait); the reply, or None after an outage.

        Redis restarting (connection refused or reset) or coming back empty (no
        persistence: the consumer group is gone, NOGROUP; a queue deleted under the
        blocking read, UNBLOCKED: :func:`group_gone`) must not end the worker:
        it waits REDIS_RETRY_S, recreates the group and reads again, so the pool is
        served again as soon as Redis is (tests/test_faults.py, the Redis drill).
        Without this the worker exited and the pool stayed offline until a
        supervisor restarted it.

        A read can fail after Redis delivered its entries (a client socket timeout
        under load, the process paused by SIGSTOP): they sit in this live worker's
        pending list, where crash recovery (dead workers only) never looks. So a
        failed read sets ``_pending_check`` and the take loop reads them again
        (:meth:`~inference.intake.JobIntake._resume_pending`).
        """
        try:
            return await self.redis.xreadgroup(
                protocol.GROUP,
                self.worker_id,
                dict.fromkeys(queues, ">"),
                count=count,
                block=block_ms,
            )
        except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
            if isinstance(exc, ResponseError) and not group_gone(exc):
                raise
            said = (
                "its queue's group is gone" if group_gone(exc) else "Redis unavailable"
            )
            logger.warning("worker %s: %s (%s)", self.worker_id, said, exc)
            self._pending_check = True
            await asyncio.sleep(REDIS_RETRY_S)
            try:
                await self._ensure_group()
            except (RedisConnectionError, RedisTimeoutError):
                pass  # still down: the next read tries again
            return None

    def _journal_open(self, job_id: str, first: JournalEntry) -> None:
        """Start the journal of a running job with its first entry (the ``meta``)."""
        self._journals[job_id] = [first]

    def _journal_close(self, job_id: str) -> None:
        """Forget a job's journal (it ended: its terminal event is written)."""
        self._journals.pop(job_id, None)

    def _journal_tokens(self, job_id: str) -> int:
        """Return how many ``token`` events this worker wrote for ``job_id``."""
        return sum(
            1
            for _id, fields in self._journals.get(job_id, ())
            if fields["e"] == protocol.EVENT_TOKEN
        )

    async def _publish_batches(
        self, batches: dict[str, list[redis_types.RedisFields]]
    ) -> dict[str, BaseException]:
        """Append running jobs' events to their streams, each job's in order, all in
        one round trip; return the jobs whose write failed, with what failed it.

        One pipeline of XADD NOMKSTREAM for every event (a command Redis refuses
        fails its job only). While Redis is unreachable
        the whole pipeline is retried every REDIS_RETRY_S seconds for up to
        REDIS_WRITE_WAIT_S seconds; after that the connection error fails every job
        it carried (each ends with an error, like any engine failure). A job whose
        stream is gone (Redis restarted empty) has the rest of its events written
        by :meth:`_publish_batch` (its journal first). Every written entry joins its
        job's journal.
        """
        deadline = time.monotonic() + REDIS_WRITE_WAIT_S
        while True:
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for job_id, batch in batches.items():
                        gen = keys.gen_key(job_id)
                        for fields in batch:
                            pipe.xadd(gen, fields, nomkstream=True)
                    ids = await pipe.execute(raise_on_error=False)
                break
            except (RedisConnectionError, RedisTimeoutError) as exc:
                if time.monotonic() > deadline:
                    return dict.fromkeys(batches, exc)
                logger.warning("worker %s: Redis unavailable mid-job", self.worker_id)
                await asyncio.sleep(REDIS_RETRY_S)
        failed: dict[str, BaseException] = {}
        at = 0
        for job_id, batch in batches.items():
            mine, at = ids[at : at + len(batch)], at + len(batch)
            written = next(
                (
                    i
                    for i, e in enumerate(mine)
                    if e is None or isinstance(e, Exception)
                ),
                len(mine),
            )
            journal = self._journals.get(job_id)
            if journal is not None:
                journal.extend(zip(mine[:written], batch[:written], strict=True))
            if written < len(batch) and isinstance(mine[written], Exception):
                failed[job_id] = mine[written]  # e.g. the key is not a stream
            elif written < len(batch):
                try:
                    await self._publish_batch(job_id, batch[written:])
                except Exception as exc:  # noqa: BLE001 - it fails this job only
                    failed[job_id] = exc
        return failed

    async def _publish_batch(
        self, job_id: str, batch: list[redis_types.RedisFields]
    ) -> None:
        """Append events to a running job's stream in order, in one round trip.

        Each is an XADD NOMKSTREAM in one pipeline: when the stream is gone (Redis
        restarted empty) the entries from the first refused one on are written after
        the journal (:meth:`_stream_restore`). While Redis is unreachable the batch is
        retried every REDIS_RETRY_S seconds for up to REDIS_WRITE_WAIT_S seconds; after
        that the connection error is raised. Every written entry joins the job's
        journal.
        """
        gen = keys.gen_key(job_id)
        deadline = time.monotonic() + REDIS_WRITE_WAIT_S
        journal = self._journals.get(job_id)
        while batch:
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for fields in batch:
                        pipe.xadd(gen, fields, nomkstream=True)
                    ids = await pipe.execute()
            except (RedisConnectionError, RedisTimeoutError):
                if time.monotonic() > deadline:
                    raise
                logger.warning("worker %s: Redis unavailable mid-job", self.worker_id)
                await asyncio.sleep(REDIS_RETRY_S)
                continue
            written = next((i for i, e in enumerate(ids) if e is None), len(ids))
            if journal is not None:
                journal.extend(zip(ids[:written], batch[:written], strict=True))
            batch = batch[written:]
            if batch:  # the stream is gone: the journal first, then this entry
                entry_id = await self._stream_restore(job_id, batch[0])
                if journal is not None and entry_id is not None:
                    journal.append((entry_id, batch[0]))
                batch = batch[1:]

    async def _stream_ensure(self, job_id: str) -> None:
        """Before a job's terminal event: write its journal back if its stream is gone,
        so the terminal event never ends a stream that lost the answer's text."""
        if self._journals.get(job_id) and not await self.redis.exists(
            keys.gen_key(job_id)
        ):
            await self._stream_restore(job_id, None)

    async def _stream_restore(
        self, job_id: str, fields: redis_types.RedisFields | None
    ) -> str | None:
        """Write a lost stream back from the journal (original entry ids), then
        ``fields`` (a new event, auto id), in one MULTI; return the new entry's id.

        An entry id at or below the stream's last one is refused by Redis (another
        writer, e.g. the web tier's watchdog, recreated the stream meanwhile); those
        entries are skipped with a warning and the new event is still written.
        """
        gen = keys.gen_key(job_id)
        journal = self._journals.get(job_id, [])
        async with self.redis.pipeline(transaction=True) as pipe:
            for entry_id, old in journal:
                pipe.xadd(gen, old, id=entry_id)
            if fields is not None:
                pipe.xadd(gen, fields)
            pipe.expire(gen, self.stream_ttl_s * 24)
            results = await pipe.execute(raise_on_error=False)
        refused = sum(isinstance(r, Exception) for r in results[: len(journal)])
        logger.warning(
            "worker %s: the stream of job %s was lost (Redis restarted?): "
            "%s entries written back, %s refused",
            self.worker_id,
            job_id,
            len(journal) - refused,
            refused,
        )
        if fields is None:
            return None
        new_id = results[len(journal)]
        if isinstance(new_id, Exception):
            raise new_id
        return new_id

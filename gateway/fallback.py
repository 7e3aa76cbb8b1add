"""Retry on the fallback pool: a generation that failed before its first token.

When a worker's engine fails before emitting any token (``error`` event with code
``engine_error`` and no ``token`` event), the finaliser calls :func:`generation_retry`
instead of storing the error. One Lua script checks the stream (no token, ends in an
engine error, not cancelled by the user, retries left) and, if so, deletes the stream and
its terminal marker, so the same job id starts afresh; the job (kept at submit time, see
:mod:`inference.keys`) is then enqueued on the first admissible pool of the failed pool's
fallback chain. The answer is therefore stored once, by whoever finalises the retried
generation, with the model that answered (from the new ``meta`` event); the quota
reservation is the same and is settled once.

Only engine errors are retried: the worker has consumed and acknowledged such a job, so
no other worker can still run it. Queue timeouts and lost workers are not retried (the
job may still sit in the old pool's queue).
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.conf import settings

from chatsite.errors import DomainError
from gateway import routing, selectors
from gateway.models import Plan
from inference import client as inference_client
from inference import keys, protocol
from inference.connections import redis_sync
from inference.redis_types import RedisFields

RETRYABLE_CODES = frozenset({protocol.ERROR_ENGINE})
_RETRY_PLAN = Plan(name="retry", priority=2**31 - 1)

# KEYS: gen stream, final marker, cancel flag, retry counter. ARGV: max retries, TTL (s),
# the id of the terminal event the caller read. Returns 1 after clearing the stream for a
# retry, 0 if it must not be retried, -1 if the stream is no longer the one the caller
# read (a concurrent finaliser retried it already).
_RETRY_LUA = """
local entries = redis.call('XRANGE', KEYS[1], '-', '+')
if #entries == 0 or entries[#entries][1] ~= ARGV[3] then return -1 end
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
for _, entry in ipairs(entries) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'e' and fields[i + 1] == 'token' then return 0 end
  end
end
local n = redis.call('INCR', KEYS[4])
redis.call('EXPIRE', KEYS[4], ARGV[2])
if n > tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""


def job_remember(
    *,
    job: protocol.Job,
    client: Any = None,
    entry: RedisFields | None = None,
) -> None:
    """Keep ``job`` for INFERENCE_STREAM_TTL_S seconds so it can be retried.

    ``client``: a pipeline to queue the command on (default: at once). ``entry``:
    ``job.to_fields()`` when the caller made it already (it enqueues the same entry).
    """
    (client or redis_sync()).set(
        keys.job_key(job.job_id),
        (entry or job.to_fields())["job"],
        ex=settings.INFERENCE_STREAM_TTL_S,
    )


def generation_retry(
    *, job_id: str, pool: str, error_code: str, terminal_id: str
) -> str | None:
    """Retry a generation that failed before its first token on a fallback pool.

    ``pool`` is the pool that failed; ``error_code`` and ``terminal_id`` the code and
    stream entry id of the ``error`` event the caller read. Returns the pool the job now
    waits in; ``""`` when a concurrent finaliser already retried it (do not finalise);
    None when it is not retried (not a retryable error, tokens were already sent, the
    user cancelled, no admissible fallback, GATEWAY_FALLBACK_RETRIES used up).
    """
    if error_code not in RETRYABLE_CODES:
        return None
    failed = selectors.pool_get(name=pool)
    if failed is None or failed.fallback_id is None:
        return None
    raw = redis_sync().get(keys.job_key(job_id))
    fallback = failed.fallback
    if raw is None or fallback is None:
        return None
    try:
        # the request was admitted already: its retry is never shed
        target = routing.pool_admit(pool=fallback, plan=_RETRY_PLAN)
    except DomainError:
        return None
    if target.name == pool:
        return None
    cleared = redis_sync().eval(
        _RETRY_LUA,
        4,
        keys.gen_key(job_id),
        keys.final_key(job_id),
        keys.cancel_key(job_id),
        keys.retries_key(job_id),
        settings.GATEWAY_FALLBACK_RETRIES,
        settings.INFERENCE_STREAM_TTL_S,
        terminal_id,
    )
    if int(cleared) < 0:
        return ""
    if not int(cleared):
        return None
    job = protocol.Job(**json.loads(raw))  # enqueued_at kept: TTFT counts the retry
    job.deadline = time.time() + settings.INFERENCE_QUEUE_TIMEOUT_S
    inference_client.job_enqueue(pool=target.name, job=job)
    return target.name

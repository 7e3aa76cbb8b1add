"""Token quotas that cannot be raced: reserve before enqueue, settle on the terminal event.

An administrator's reset of a user's windows is :mod:`gateway.quota_reset`.

Three fixed windows per user, all in tokens (prompt + completion): the current UTC minute
(tokens per minute), UTC day and UTC calendar month. A request reserves its worst case
(estimated prompt tokens + ``max_tokens``) against every window in ONE Redis Lua script,
so concurrent requests can never together pass a limit: either all windows have room and
all are charged, or none is. Settlement replaces the reservation by the actual usage
(the rest is refunded), once: the reservation record is deleted by the same script that
applies the refund. A released (failed or rejected) request is settled at zero.

No reservation may leak. Until its job is submitted (enqueued, or answered from a
cache: :func:`quota_reservation_submitted`) a reservation is also listed as
*unsubmitted*, with its time; from submission on, the relay or the reaper settles it
from the generation's terminal event. A web process that dies between reservation and
submission (or before its transaction commits) leaves an unsubmitted entry behind:
:mod:`gateway.quota_sweep` (a Celery beat task) releases every one older than
GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S. It releases through the settle script, so a sweep
and a late settlement cannot both apply.

The Redis keys (window counters, reservations, the sweep's buckets) are named in
:mod:`inference.keys`; every key a script touches is in the user's slot.

Windows are fixed (not sliding): across a minute boundary a user can spend up to twice
the per-minute limit within 60 s; the day and month limits are exact.
"""

from __future__ import annotations

import calendar
import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from chatsite.errors import QuotaExceeded
from gateway.quota_lua import RESERVE_COUNTED_LUA, RESERVE_LUA, SETTLE_LUA
from inference import keys
from inference.connections import redis_sync

if TYPE_CHECKING:
    from gateway.requestrate import RequestCounter

WINDOW_MINUTE = "minute"
WINDOW_DAY = "day"
WINDOW_MONTH = "month"
_LABELS = {
    WINDOW_MINUTE: "per-minute token limit",
    WINDOW_DAY: "daily token limit",
    WINDOW_MONTH: "monthly token budget",
}
# A reservation nobody settles (a lost web process and reaper) is dropped after this.
RESERVATION_TTL_S = 40 * 86400


@dataclass(frozen=True)
class Limits:
    """A plan's token limits; None = no limit (tokens)."""

    per_minute: int | None = None
    per_day: int | None = None
    per_month: int | None = None


@dataclass(frozen=True)
class Window:
    """One window's state for a user: tokens used, limit (None: none), reset time."""

    name: str
    key: str
    limit: int | None
    used: int
    resets_at: float  # epoch seconds

    @property
    def remaining(self) -> int | None:
        """Tokens left in the window (None: no limit)."""
        return None if self.limit is None else max(0, self.limit - self.used)


def _windows(user_id: int, limits: Limits, now: float) -> list[Window]:
    t = dt.datetime.fromtimestamp(now, tz=dt.UTC)
    minute = int(now // 60)
    day_end = dt.datetime(t.year, t.month, t.day, tzinfo=dt.UTC) + dt.timedelta(days=1)
    days_in_month = calendar.monthrange(t.year, t.month)[1]
    month_end = dt.datetime(t.year, t.month, 1, tzinfo=dt.UTC) + dt.timedelta(
        days=days_in_month
    )
    return [
        Window(
            WINDOW_MINUTE,
            keys.quota_minute_key(user_id, minute),
            limits.per_minute,
            0,
            (minute + 1) * 60,
        ),
        Window(
            WINDOW_DAY,
            keys.quota_day_key(user_id, t.date()),
            limits.per_day,
            0,
            day_end.timestamp(),
        ),
        Window(
            WINDOW_MONTH,
            keys.quota_month_key(user_id, t.date()),
            limits.per_month,
            0,
            month_end.timestamp(),
        ),
    ]


def _duration(seconds: float) -> str:
    """Format seconds as OpenAI's reset durations do (``"1h2m3s"``, ``"45s"``)."""
    s = max(1, math.ceil(seconds))
    hours, rest = divmod(s, 3600)
    minutes, secs = divmod(rest, 60)
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return out + (f"{secs}s" if secs or not out else "")


# What a request too large for a whole window can change, by what it is.
SHRINK_ADVICE = "Ask for a shorter answer (lower max_tokens) or a shorter prompt."
SHRINK_ADVICE_EMBEDDINGS = "Send fewer or shorter inputs per request."


def _exceeded(
    window: Window, *, amount: int, now: float, advice: str = SHRINK_ADVICE
) -> QuotaExceeded:
    assert window.limit is not None
    wait_s = max(1, math.ceil(window.resets_at - now))
    at = dt.datetime.fromtimestamp(window.resets_at, tz=dt.UTC)
    when = f"{at:%H:%M:%S} UTC" if wait_s < 86400 else f"{at:%Y-%m-%d %H:%M} UTC"
    label = _LABELS[window.name]
    # a request larger than the whole window can never pass it: not worth a retry
    retryable = amount <= window.limit
    if not retryable:
        message = (
            f"This request may use up to {amount:,} tokens, more than your plan's "
            f"{label} of {window.limit:,} tokens. {advice}"
        )
    else:
        message = (
            f"You have reached your plan's {label} ({window.limit:,} tokens; "
            f"{window.remaining:,} left, this request needs up to {amount:,}). "
            f"It resets in {_duration(wait_s)} (at {when})."
        )
    return QuotaExceeded(
        message,
        code=f"quota_{window.name}",
        retryable=retryable,
        headers={
            "Retry-After": str(wait_s),
            "x-ratelimit-limit-tokens": str(window.limit),
            "x-ratelimit-remaining-tokens": str(window.remaining),
            "x-ratelimit-reset-tokens": _duration(wait_s),
        },
    )


@dataclass
class Piggyback:
    """Commands of other slots sent in a reservation's round trip: ``queue(pipe)``
    queues them; ``replies`` then holds their replies (an Exception where one failed)."""

    queue: Callable[[Any], None]
    replies: list[Any] = field(default_factory=list)


def quota_reserve(
    *,
    user_id: int,
    job_id: str,
    tokens: int,
    limits: Limits,
    now: float | None = None,
    advice: str = SHRINK_ADVICE,
    seed: Callable[[list[Window]], None] | None = None,
    count: RequestCounter | None = None,
    piggyback: Piggyback | None = None,
) -> list[Window]:
    """Reserve ``tokens`` (estimated prompt + max_tokens) in every window, atomically.

    With ``seed``, the same script first checks that the day and month counters exist
    (:func:`quota_unseeded` without its own round trip); when one is absent nothing is
    charged, ``seed`` is called with the absent windows (it seeds them from the usage
    records, :func:`quota_seed`) and the reservation is made then.

    The reservation stays listed as unsubmitted until :func:`quota_reservation_submitted`
    or its settlement; ``now`` (epoch s, default: now) is its time for the sweep too.
    ``advice`` ends the message of a request too large for a whole window.

    With ``count`` (an API request not counted yet) the same script first counts the
    request against its requests per minute (:mod:`gateway.requestrate`): a request
    over that limit is refused with its 429 and nothing is reserved; a request whose
    reservation is refused stays counted. ``piggyback``: commands sent in the same
    round trip.

    Returns the windows after charging. Raises :class:`QuotaExceeded` (429, with
    ``Retry-After`` and ``x-ratelimit-*-tokens`` headers naming the first window that
    has no room); nothing is charged then.
    """
    now = time.time() if now is None else now
    windows = _windows(user_id, limits, now)
    ttls = [int(w.resets_at - now) + 60 for w in windows]
    unsubmitted = keys.unsubmitted_key(job_id)
    member = keys.unsubmitted_member(user_id, job_id)

    counting = count is not None and count.uncounted()

    def reserve(check: bool, pipe: Any, *, counted: bool = False) -> Any:
        rpm = count.script_keys_args() if count and counted else ([], [])
        return keys.eval_on(
            pipe,
            RESERVE_COUNTED_LUA if counted else RESERVE_LUA,
            5 + len(rpm[0]),
            *[w.key for w in windows],
            keys.reservation_key(user_id, job_id),
            keys.reservations_key(user_id),
            *rpm[0],
            tokens,
            *[-1 if w.limit is None else w.limit for w in windows],
            *ttls,
            RESERVATION_TTL_S,
            repr(now),
            job_id,
            "1" if check else "0",
            *rpm[1],
        )

    # Listed for the sweep before the reservation exists, in the same round trip: a
    # crash in between leaves an entry whose release finds nothing to give back.
    with redis_sync().pipeline(transaction=False) as pipe:
        pipe.zadd(unsubmitted, {member: now})
        reserve(seed is not None, pipe, counted=counting)
        if piggyback is not None:
            piggyback.queue(pipe)
        replies = pipe.execute(raise_on_error=False)
    if piggyback is not None:
        piggyback.replies = replies[2:]
    if error := next((r for r in replies[:2] if isinstance(r, Exception)), None):
        raise error
    result = replies[1]
    if counting and count is not None:
        if int(result[0]) == -2:  # over the requests per minute: its 429 below
            redis_sync().zrem(unsubmitted, member)
        result = count.reserve_reply(result)
    if int(result[0]) == -1:
        assert seed is not None
        absent = int(result[1])
        seed([w for bit, w in ((1, windows[1]), (2, windows[2])) if absent & bit])
        result = reserve(False, redis_sync())
    if int(result[0]) == 0:
        redis_sync().zrem(unsubmitted, member)
        blocked = windows[int(result[1]) - 1]
        blocked = Window(
            blocked.name, blocked.key, blocked.limit, int(result[2]), blocked.resets_at
        )
        raise _exceeded(blocked, amount=tokens, now=now, advice=advice)
    return [
        Window(w.name, w.key, w.limit, int(used), w.resets_at)
        for w, used in zip(windows, result[1:], strict=True)
    ]


def reservation_settle(client: Any, *, user_id: int, job_id: str, tokens: int) -> int:
    """Settle ``job_id``'s reservation and drop its sweep entry: the tokens reserved, or -1."""
    reservation = keys.reservation_key(user_id, job_id)  # its windows go in KEYS
    windows = cast(list[str | None], client.hmget(reservation, "k1", "k2", "k3"))
    with client.pipeline(transaction=False) as pipe:
        if all(windows):
            keys.eval_on(
                pipe,
                SETTLE_LUA,
                5,
                reservation,
                keys.reservations_key(user_id),
                *windows,
                max(0, tokens),
                job_id,
            )
        pipe.zrem(
            keys.unsubmitted_key(job_id), keys.unsubmitted_member(user_id, job_id)
        )
        results = pipe.execute()
    return int(results[0]) if all(windows) else -1


def quota_settle(*, user_id: int, job_id: str, tokens: int) -> int | None:
    """Replace the reservation of ``user_id``'s job by its actual usage (``tokens``);
    refund the rest.

    Idempotent: only the first call for a job changes the counters. Returns the tokens
    that had been reserved, or None when there was nothing to settle.
    """
    reserved = reservation_settle(
        redis_sync(), user_id=user_id, job_id=job_id, tokens=tokens
    )
    return None if reserved < 0 else reserved


def quota_settle_many(settles: list[tuple[int, str, int]]) -> list[int | None]:
    """:func:`quota_settle` of many jobs, ``[(user_id, job_id, tokens)]``, in two
    pipelined round trips (the reservations' window keys, then a settle script per
    job, each in its own user's slot: cluster-safe). Returns, per job in order, the
    tokens that had been reserved or None."""
    client = redis_sync()
    with client.pipeline(transaction=False) as pipe:
        for user_id, job_id, _tokens in settles:
            pipe.hmget(keys.reservation_key(user_id, job_id), "k1", "k2", "k3")
        windows = cast(list[list[str | None]], pipe.execute())
    with client.pipeline(transaction=False) as pipe:
        for (user_id, job_id, tokens), job_windows in zip(
            settles, windows, strict=True
        ):
            if all(job_windows):
                keys.eval_on(
                    pipe,
                    SETTLE_LUA,
                    5,
                    keys.reservation_key(user_id, job_id),
                    keys.reservations_key(user_id),
                    *job_windows,
                    max(0, tokens),
                    job_id,
                )
            pipe.zrem(
                keys.unsubmitted_key(job_id), keys.unsubmitted_member(user_id, job_id)
            )
        results = iter(pipe.execute())
    out: list[int | None] = []
    for job_windows in windows:
        reserved = int(next(results)) if all(job_windows) else -1
        next(results)  # the ZREM
        out.append(None if reserved < 0 else reserved)
    return out


def quota_release(*, user_id: int, job_id: str) -> int | None:
    """Give back a whole reservation (the request was rejected or failed)."""
    return quota_settle(user_id=user_id, job_id=job_id, tokens=0)


def quota_reservation_submitted(
    *, user_id: int, job_id: str, client: Any = None
) -> None:
    """Record that ``job_id`` was enqueued or served from a cache: no sweep releases it.

    From then on the generation's terminal event settles the reservation (relay or
    reaper). Call right after the enqueue: a crash between the two leaves the job
    running with its reservation swept (its usage is then not charged to the
    windows), which is cheaper than a budget held for RESERVATION_TTL_S. ``client``: a
    pipeline to queue the command on (default: at once).
    """
    (client or redis_sync()).zrem(
        keys.unsubmitted_key(job_id), keys.unsubmitted_member(user_id, job_id)
    )


def quota_unseeded(*, user_id: int, now: float | None = None) -> list[Window]:
    """Return the user's day and month windows whose counters are absent from Redis.

    Absent means a new period, or a Redis that lost its data; the caller seeds them from
    the usage records (:func:`quota_seed`) so a restart does not reset budgets.
    """
    now = time.time() if now is None else now
    windows = _windows(user_id, Limits(), now)[1:]
    client = redis_sync()
    with client.pipeline(transaction=False) as pipe:
        for w in windows:
            pipe.exists(w.key)
        present = pipe.execute()
    return [w for w, there in zip(windows, present, strict=True) if not there]


def quota_seed(*, window: Window, tokens: int, now: float | None = None) -> bool:
    """Set an absent window counter to ``tokens`` (already spent); never overwrite one.

    Returns True if this call set it (SET NX, so concurrent seeders cannot double it).
    """
    now = time.time() if now is None else now
    ttl = int(window.resets_at - now) + 60
    return bool(redis_sync().set(window.key, max(0, tokens), nx=True, ex=ttl))


def quota_windows(
    *, user_id: int, limits: Limits, now: float | None = None
) -> list[Window]:
    """Return the user's current windows (tokens used, limits, reset times)."""
    now = time.time() if now is None else now
    windows = _windows(user_id, limits, now)
    values = redis_sync().mget([w.key for w in windows])
    return [
        Window(w.name, w.key, w.limit, int(v or 0), w.resets_at)
        for w, v in zip(windows, values, strict=True)
    ]

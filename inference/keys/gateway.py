"""The gateway's Redis keys (owner :mod:`gateway`). Part of :mod:`inference.keys`.

- ``gw:quota:{u:<user>}:m:<epoch_minute>`` / ``:d:<YYYYMMDD>`` / ``:M:<YYYYMM>``:
  integer, tokens charged in that UTC window (reservations included); expires 60 s
  after the window ends.
- ``gw:res:{u:<user>}:<job>``: hash ``amount, k1, k2, k3``, an unsettled reservation
  (tokens) and the window counters it charged; deleted on settlement, TTL
  ``quota.RESERVATION_TTL_S``. Tagged by user: settling moves the user's counters.
- ``gw:resv:{u:<user>}``: sorted set, job id -> reservation time (epoch s), the
  user's unsettled reservations (what a quota reset counts); TTL as above.
- ``gw:unsubmitted:{r:<n>}`` (n < :data:`UNSUBMITTED_BUCKETS`): sorted set,
  ``<user>:<job>`` -> reservation time, reservations whose job was not submitted
  yet (the sweep's list). No TTL (entries leave one by one).
- ``gw:rpm:{u:<user>}:u:<epoch_minute>`` / ``gw:rpm:{u:<user>}:k:<key_id>:<epoch_minute>``:
  integer, API requests of the user / of one of its keys in a UTC minute.
- ``gw:cache:exact:<sha256>``: string, a cached answer (GATEWAY_CACHE_TTL_S).
- ``gw:cache:pending:{<job>}``, ``gw:job:{<job>}``, ``gw:retries:{<job>}``: a job's
  cache material, its JSON for a fallback retry, its retry count.
- ``ratelimit:refused:<group>:<digest>``: string, a session's rate-limit refusal.
- ``login:failures:{l:<digest>}`` (integer) / ``login:locked:{l:<digest>}`` (string):
  failed logins of one name, and its lockout.
"""

from __future__ import annotations

import datetime as dt
import zlib

from inference.keys.tags import tagged_job, tagged_user

# --- quotas ---------------------------------------------------------------------

UNSUBMITTED_BUCKETS = 16
RESERVATION_KEY_PATTERN = "gw:res:*"


def quota_minute_key(user_id: int, epoch_minute: int) -> str:
    """Return the counter of a user's tokens in one UTC minute (epoch s // 60)."""
    return f"gw:quota:{tagged_user(user_id)}:m:{epoch_minute}"


def quota_day_key(user_id: int, day: dt.date) -> str:
    """Return the counter of a user's tokens in one UTC day."""
    return f"gw:quota:{tagged_user(user_id)}:d:{day:%Y%m%d}"


def quota_month_key(user_id: int, month: dt.date) -> str:
    """Return the counter of a user's tokens in the UTC calendar month of ``month``."""
    return f"gw:quota:{tagged_user(user_id)}:M:{month:%Y%m}"


def quota_user_pattern(user_id: int) -> str:
    """Return a SCAN pattern matching every quota counter of a user."""
    return f"gw:quota:{tagged_user(user_id)}:*"


def reservation_key(user_id: int, job_id: str) -> str:
    """Return the hash of a job's unsettled reservation (in its user's slot)."""
    return f"gw:res:{tagged_user(user_id)}:{job_id}"


def reservations_key(user_id: int) -> str:
    """Return the sorted set of a user's unsettled reservations (job id -> epoch s)."""
    return f"gw:resv:{tagged_user(user_id)}"


def unsubmitted_key(job_id: str) -> str:
    """Return the sweep bucket listing a job's reservation until it is submitted."""
    bucket = zlib.crc32(job_id.encode()) % UNSUBMITTED_BUCKETS
    return f"gw:unsubmitted:{{r:{bucket}}}"


def unsubmitted_keys() -> list[str]:
    """Return every sweep bucket (:func:`unsubmitted_key`)."""
    return [f"gw:unsubmitted:{{r:{n}}}" for n in range(UNSUBMITTED_BUCKETS)]


def unsubmitted_member(user_id: int, job_id: str) -> str:
    """Return a sweep bucket's member for a reservation (``<user>:<job>``)."""
    return f"{user_id}:{job_id}"


def unsubmitted_member_parse(member: str) -> tuple[int, str]:
    """Return ``(user_id, job_id)`` of a sweep bucket's member."""
    user, _, job_id = member.partition(":")
    return int(user), job_id


# --- API request rates, caches, fallback, rate-limit marks -------------------------


def rpm_user_key(user_id: int, epoch_minute: int) -> str:
    """Return the API requests of ``user_id`` in one UTC minute (epoch s // 60)."""
    return f"gw:rpm:{tagged_user(user_id)}:u:{epoch_minute}"


def rpm_key_key(user_id: int, key_id: int, epoch_minute: int) -> str:
    """Return the API requests of ``user_id``'s API key ``key_id`` in one UTC minute
    (in the user's slot: one script counts both)."""
    return f"gw:rpm:{tagged_user(user_id)}:k:{key_id}:{epoch_minute}"


CACHE_KEY_PATTERN = "gw:cache:*"
CACHE_EXACT_KEY_PATTERN = "gw:cache:exact:*"
CACHE_PENDING_KEY_PATTERN = "gw:cache:pending:*"


def cache_exact_key(digest: str) -> str:
    """Return an exact-cache entry (``digest``: SHA-256 hex of the request)."""
    return f"gw:cache:exact:{digest}"


def cache_pending_key(job_id: str) -> str:
    """Return an admitted request's cache material, kept until settlement."""
    return f"gw:cache:pending:{tagged_job(job_id)}"


def job_key(job_id: str) -> str:
    """Return a submitted job's JSON (for a fallback retry)."""
    return f"gw:job:{tagged_job(job_id)}"


def retries_key(job_id: str) -> str:
    """Return the count of a job's fallback retries."""
    return f"gw:retries:{tagged_job(job_id)}"


def ratelimit_refused_key(group: str, digest: str) -> str:
    """Return the mark of a session refused by rate-limit ``group`` (``digest``: of its
    session key)."""
    return f"ratelimit:refused:{group}:{digest}"


def login_failures_key(digest: str) -> str:
    """Return the failed-login count of one login name (``digest``: of the name)."""
    return f"login:failures:{{l:{digest}}}"


def login_locked_key(digest: str) -> str:
    """Return the lockout mark of one login name (its failures' slot)."""
    return f"login:locked:{{l:{digest}}}"

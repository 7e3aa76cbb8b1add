"""Every Redis key of the gateway (the inference tier's keys live in
:mod:`inference.protocol`); nothing else in the gateway builds a key by hand.

Quotas (:mod:`gateway.quota`), all counts in tokens (prompt + completion):

- ``gw:quota:{user_id}:m:{epoch_minute}`` / ``:d:{YYYYMMDD}`` / ``:M:{YYYYMM}``:
  string (integer), the tokens charged in that UTC minute / day / calendar month,
  unsettled reservations included. Expires 60 s after its window ends. Staff's
  ``quota_reset.quota_reset`` sets the current ones to the tokens still reserved.
- ``gw:res:{job_id}``: hash ``amount, k1, k2, k3``: an unsettled reservation (tokens)
  and the three window counters it charged. Deleted by the settle script (settlement,
  release, sweep); expires after ``quota.RESERVATION_TTL_S`` (40 days) as a last resort.
- ``gw:reservations:unsubmitted``: sorted set, member = job id, score = reservation
  time (epoch s): reservations whose job was neither enqueued nor served from a cache
  yet. Added by the reserve script; removed when the job is submitted
  (``quota.quota_reservation_submitted``) or the reservation settled. An entry older
  than GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S belongs to a web process that died before
  submitting: ``quota.quota_reservations_sweep`` releases it. No TTL (entries leave
  one by one).

Answer caches (:mod:`gateway.cache`):

- ``gw:cache:exact:{sha256}``: string, JSON ``{"text", "model", "finish_reason"}`` of a
  cached answer. Expires after GATEWAY_CACHE_TTL_S.
- ``gw:cache:pending:{job_id}``: string, JSON of the cache material of an admitted
  request, read (GETDEL) when its generation is settled. Expires after
  INFERENCE_STREAM_TTL_S.

Fallback retries (:mod:`gateway.fallback`):

- ``gw:job:{job_id}``: string, the JSON of a submitted :class:`inference.protocol.Job`,
  so a generation that failed before its first token can be enqueued again. Expires
  after INFERENCE_STREAM_TTL_S.
- ``gw:retries:{job_id}``: string (integer), how many times the job was retried.
  Expires after INFERENCE_STREAM_TTL_S.

API request rates (:mod:`gateway.requestrate`):

- ``gw:rpm:u:{user_id}:{epoch_minute}`` / ``gw:rpm:k:{key_id}:{epoch_minute}``:
  string (integer), the API requests counted for the user (all keys) / one key in
  that UTC minute. Expires 60 s after its minute ends.

The site's request-rate limits (:mod:`gateway.ratelimits`) are django-ratelimit's, kept in the
Django cache (``CACHES["default"]``, key prefix ``cache``); their keys are the
library's, not ours.

All keys live on one Redis node: the quota scripts read key names out of a hash, which
Redis Cluster does not allow.
"""

from __future__ import annotations

import datetime as dt

_QUOTA = "gw:quota"
_RESERVATION = "gw:res"
_CACHE = "gw:cache"

UNSUBMITTED_RESERVATIONS_KEY = "gw:reservations:unsubmitted"
RESERVATION_KEY_PATTERN = f"{_RESERVATION}:*"
CACHE_KEY_PATTERN = f"{_CACHE}:*"
CACHE_EXACT_KEY_PATTERN = f"{_CACHE}:exact:*"
CACHE_PENDING_KEY_PATTERN = f"{_CACHE}:pending:*"


def quota_minute_key(user_id: int, epoch_minute: int) -> str:
    """Return the counter of a user's tokens in one UTC minute (epoch s // 60)."""
    return f"{_QUOTA}:{user_id}:m:{epoch_minute}"


def quota_day_key(user_id: int, day: dt.date) -> str:
    """Return the counter of a user's tokens in one UTC day."""
    return f"{_QUOTA}:{user_id}:d:{day:%Y%m%d}"


def quota_month_key(user_id: int, month: dt.date) -> str:
    """Return the counter of a user's tokens in the UTC calendar month of ``month``."""
    return f"{_QUOTA}:{user_id}:M:{month:%Y%m}"


def quota_user_pattern(user_id: int) -> str:
    """Return a SCAN pattern matching every quota counter of a user."""
    return f"{_QUOTA}:{user_id}:*"


def rpm_user_key(user_id: int, epoch_minute: int) -> str:
    """The API requests of ``user_id`` in one UTC minute (epoch s // 60)."""
    return f"gw:rpm:u:{user_id}:{epoch_minute}"


def rpm_key_key(key_id: int, epoch_minute: int) -> str:
    """The API requests of the API key ``key_id`` in one UTC minute."""
    return f"gw:rpm:k:{key_id}:{epoch_minute}"


def reservation_key(job_id: str) -> str:
    """Return the hash holding a job's unsettled quota reservation."""
    return f"{_RESERVATION}:{job_id}"


def cache_exact_key(digest: str) -> str:
    """Return an exact-cache entry's key (``digest``: SHA-256 hex of the request)."""
    return f"{_CACHE}:exact:{digest}"


def cache_pending_key(job_id: str) -> str:
    """Return the key holding an admitted request's cache material until settlement."""
    return f"{_CACHE}:pending:{job_id}"


def job_key(job_id: str) -> str:
    """Return the key keeping a submitted job's JSON (for a fallback retry)."""
    return f"gw:job:{job_id}"


def retries_key(job_id: str) -> str:
    """Return the key counting a job's fallback retries."""
    return f"gw:retries:{job_id}"

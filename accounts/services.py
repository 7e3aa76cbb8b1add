"""Account services of the settings page: preferences, profile, and account deletion.

Account deletion removes all the user's data, vectors and cache entries included,
as follows:

- every row that points at the user with ``on_delete=CASCADE`` goes with the user row:
  conversations, messages, feedback, citations, documents, chunks and their vectors,
  memory facts and settings, semantic cache entries, API keys, preferences,
  subscription, suspensions, moderation events, and usage records. Usage records are
  erased, not kept anonymised: their job and message ids and timings lead back to the
  person, and billing totals of closed periods are exported beforehand (``usage_report``,
  the billing console's CSV);
- rows that only *mention* the user as a staff actor keep their text and lose the link
  (``SET_NULL``): the audit log is append-only (it records staff actions, with the
  actor's name in ``actor_label``), eval runs keep their results;
- Redis: the user's quota counters, the exact-cache entries and cache material stored
  for them, and every per-job key of their generations (stream, final text, cancel and
  moderation keys, reservations, fallback copies). The moderation verdict cache is keyed
  by a hash of the text, holds no text and no user, and expires by itself; django-ratelimit's
  counters are the library's (hashed names) and expire within their rate period.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Appearance
from chatsite.errors import InvalidInput
from gateway import selectors
from gateway.models import UsageRecord, UserPreference
from inference import keys
from inference.connections import redis_sync
from memory import services as memory_services

logger = logging.getLogger(__name__)

# SCAN batch size (keys per round trip) of the Redis clean-up.
_SCAN_COUNT = 500


def theme_save(*, user: User, theme: str) -> Appearance:
    """Store the user's colour theme: "system", "light" or "dark" (:class:`Appearance`).

    Raises InvalidInput (nothing stored) for any other value.
    """
    if theme not in Appearance.Theme.values:
        raise InvalidInput(
            "Choose the system, light or dark theme.", code="unknown_theme"
        )
    appearance, _ = Appearance.objects.update_or_create(
        user_id=user.pk, defaults={"theme": theme}
    )
    return appearance


def preferences_save(
    *,
    user: User,
    reuse_cached_answers: bool,
    memory_enabled: bool,
    default_model: str,
) -> UserPreference:
    """Store the preferences form of the settings page in one transaction; return them.

    ``default_model``: a pool name the user's plan allows (:func:`selectors.pool_choices`)
    or "" for automatic routing. Raises InvalidInput (nothing stored) for any other value.
    """
    default_model = (default_model or "").strip()
    allowed = {p.name for p in selectors.pool_choices(user=user)}
    if default_model and default_model not in allowed:
        raise InvalidInput(
            "That model is not available on your plan.", code="unknown_model"
        )
    with transaction.atomic():
        preference, _ = UserPreference.objects.update_or_create(
            user_id=user.pk,
            defaults={
                "reuse_cached_answers": bool(reuse_cached_answers),
                "default_model": default_model,
                "updated_at": timezone.now(),
            },
        )
        memory_services.memory_enabled_set(user=user, enabled=bool(memory_enabled))
    return preference


def profile_update(*, user: User, username: str, email: str) -> User:
    """Change the user's username and e-mail address (validated by the caller's form).

    Raises InvalidInput when the username was taken meanwhile (the unique index decides,
    not a check-then-act); nothing is changed then.
    """
    user.username = username
    user.email = email
    try:
        with transaction.atomic():
            user.save(update_fields=["username", "email"])
    except IntegrityError as exc:
        user.refresh_from_db()
        raise InvalidInput(
            "A user with that username already exists.", code="username_taken"
        ) from exc
    return user


def account_delete(*, user: User) -> dict[str, int]:
    """Delete the user and all their data (see the module docstring for what goes).

    Rows go in one transaction; the Redis keys after it commits (a rollback leaves
    them). Returns the rows deleted per model label (Django's ``delete()`` count).
    """
    user_id = user.pk
    job_ids = list(
        UsageRecord.objects.filter(user_id=user_id).values_list("job_id", flat=True)
    )
    with transaction.atomic():
        _total, per_model = User.objects.filter(pk=user_id).delete()
        transaction.on_commit(
            lambda: account_redis_purge(user_id=user_id, job_ids=job_ids)
        )
    logger.info("account %s deleted: %s", user_id, per_model)
    return per_model


def _entry_user(raw: Any, field: str) -> Any:
    try:
        return json.loads(raw).get(field)
    except (TypeError, ValueError, AttributeError):
        return None


def account_redis_purge(*, user_id: int, job_ids: list[str]) -> int:
    """Delete a (deleted) user's Redis keys; return how many were deleted.

    Quota counters by pattern; exact-cache entries and pending cache material by
    scanning their key space and reading the owner stored in each value (entries
    written before the owner was stored expire after GATEWAY_CACHE_TTL_S); per-job
    keys of ``job_ids``. Safe to run twice.
    """
    client = redis_sync()
    doomed: list[str] = list(
        keys.scan_iter_all(client, keys.quota_user_pattern(user_id), count=_SCAN_COUNT)
    )
    doomed.append(keys.reservations_key(user_id))
    for pattern, field in (
        (keys.CACHE_EXACT_KEY_PATTERN, "user"),
        (keys.CACHE_PENDING_KEY_PATTERN, "user_id"),
    ):
        for key in keys.scan_iter_all(client, pattern, count=_SCAN_COUNT):
            if _entry_user(client.get(key), field) == user_id:
                doomed.append(key)
    for job_id in job_ids:
        doomed += [*keys.job_keys(job_id), keys.reservation_key(user_id, job_id)]
    deleted = 0
    # a DEL of keys in several slots: split per slot on a cluster (a clean-up)
    for start in range(0, len(doomed), _SCAN_COUNT):
        deleted += int(client.delete(*doomed[start : start + _SCAN_COUNT]))
    return deleted

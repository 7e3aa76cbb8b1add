"""Writes that set an evaluation run up: check the set and the pool, create the
pending run, and the service user runs are sent as (EVAL_USERNAME on EVAL_PLAN_NAME).
Runs are executed by :func:`evaluation.services.eval_run_execute`.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Min

from chatsite.errors import InvalidInput, NotFound
from evaluation.models import EvalRun, EvalSet
from gateway import selectors
from gateway.models import ModelPool, Plan, Subscription

# The most times one run sends each case.
MAX_REPEAT = 100


def _pool_check(pool: str) -> None:
    """Raise NotFound unless ``pool`` is an enabled chat pool (or, with no chat pool in
    the database, the default pool)."""
    config = selectors.gateway_config()
    chat = config.pools_of(kind=ModelPool.Kind.CHAT)
    if not chat:
        if pool == settings.INFERENCE_DEFAULT_POOL:
            return
        raise NotFound(
            f"No pool {pool!r}: none is defined, only the default pool "
            f"{settings.INFERENCE_DEFAULT_POOL!r} serves."
        )
    if not any(p.name == pool and p.enabled for p in chat):
        names = ", ".join(sorted(p.name for p in chat if p.enabled)) or "none"
        raise NotFound(f"No enabled chat pool {pool!r} (enabled: {names}).")


def eval_run_create(
    *,
    set_name: str,
    pool: str,
    repeat: int = 1,
    created_by: User | None = None,
) -> EvalRun:
    """Create a pending run of set ``set_name`` on ``pool`` (each case ``repeat``
    times, 1 to MAX_REPEAT). Raises NotFound (unknown set or pool) and InvalidInput
    (bad repeat, empty set). Start it with
    :func:`evaluation.services.eval_run_execute` (inline) or
    :func:`evaluation.tasks.eval_run_enqueue` (a Celery worker)."""
    if not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
        raise InvalidInput(f"repeat must be between 1 and {MAX_REPEAT}.")
    try:
        eval_set = EvalSet.objects.get(name=set_name)
    except EvalSet.DoesNotExist as exc:
        known = ", ".join(EvalSet.objects.values_list("name", flat=True)) or "none"
        raise NotFound(
            f"No eval set {set_name!r} (known: {known}; import one with "
            "manage.py eval_import FILE)."
        ) from exc
    _pool_check(pool)
    cases = eval_set.cases.count()
    if not cases:
        raise InvalidInput(f"The eval set {set_name!r} has no case.")
    return EvalRun.objects.create(
        eval_set=eval_set,
        pool=pool,
        repeat=repeat,
        total=cases * repeat,
        created_by=created_by if created_by and created_by.pk else None,
    )


def eval_service_user() -> User:
    """Return the service user runs are sent as (EVAL_USERNAME), on the eval plan.

    Created on first use: the user (no usable password: it cannot sign in) and the plan
    EVAL_PLAN_NAME, without limits, at the lowest priority of the existing plans (so
    the free tier stays the lowest user plan; the eval plan is shed by name, before
    it). An admin may give the plan limits or pools; they are kept.
    """
    with transaction.atomic():
        user, created = User.objects.get_or_create(
            username=settings.EVAL_USERNAME, defaults={"is_active": True}
        )
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        plan = Plan.objects.filter(name=settings.EVAL_PLAN_NAME).first()
        if plan is None:
            lowest = Plan.objects.aggregate(p=Min("priority"))["p"]
            plan = Plan.objects.create(
                name=settings.EVAL_PLAN_NAME, priority=lowest or 0
            )
        Subscription.objects.update_or_create(user=user, defaults={"plan": plan})
    return user

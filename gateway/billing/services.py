"""Staff writes of the billing console: create a plan, put a user on a plan, give a
user their quota back. Each appends to the audit log (:mod:`audit`) like the admin's
edits, with the actor (a staff user, or ``actor_label`` for a command)."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from audit.models import AuditLogEntry
from audit.services import audit_record, audit_snapshot
from chatsite.errors import Conflict, InvalidInput, NotFound
from gateway import quota_reset
from gateway.models import ModelPool, Plan, Subscription
from gateway.selectors import PLAN_ID_ATTR


def _limit_check(value: int | None, *, name: str) -> None:
    if value is not None and value < 0:
        raise InvalidInput(
            f"{name} must be 0 or more tokens (or no limit), not {value}."
        )


def plan_create(
    *,
    name: str,
    tokens_per_month: int | None,
    tokens_per_day: int | None = None,
    tokens_per_minute: int | None = None,
    priority: int = 0,
    pools: list[str] | None = None,
    is_default: bool = False,
    actor: Any = None,
    actor_label: str | None = None,
) -> Plan:
    """Create the plan ``name`` with token limits (tokens; None: no limit).

    ``pools``: names of the pools it may use (none listed: every enabled pool).
    ``is_default``: it becomes the plan of users without a subscription, taking the
    mark from the previous default (that change is audited too). Raises
    :class:`InvalidInput` (empty name, negative limit), :class:`Conflict` (a plan of
    that name exists), :class:`NotFound` (an unknown pool). All or nothing.
    """
    name = name.strip()
    if not name:
        raise InvalidInput("The plan name must not be empty.")
    _limit_check(tokens_per_month, name="The monthly token budget")
    _limit_check(tokens_per_day, name="The daily token limit")
    _limit_check(tokens_per_minute, name="The per-minute token limit")
    wanted = sorted(set(pools or []))
    found = {p.name: p for p in ModelPool.objects.filter(name__in=wanted)}
    missing = [p for p in wanted if p not in found]
    if missing:
        known = ", ".join(ModelPool.objects.values_list("name", flat=True)) or "none"
        raise NotFound(f"No pool named {', '.join(missing)} (pools: {known}).")
    with transaction.atomic():
        if is_default:
            for old in Plan.objects.select_for_update().filter(is_default=True):
                before = audit_snapshot(old)
                old.is_default = False
                old.save(update_fields=["is_default"])
                audit_record(
                    actor=actor,
                    actor_label=actor_label,
                    action=AuditLogEntry.Verb.CHANGE,
                    obj=old,
                    before=before,
                    after=audit_snapshot(old),
                )
        try:
            with transaction.atomic():  # a concurrent create of the same name
                plan = Plan.objects.create(
                    name=name,
                    monthly_token_budget=tokens_per_month,
                    tokens_per_day=tokens_per_day,
                    tokens_per_minute=tokens_per_minute,
                    priority=priority,
                    is_default=is_default,
                )
        except IntegrityError as exc:
            if "one_default_plan" in str(exc):
                raise Conflict(
                    "Another plan was made the default at the same time; try again."
                ) from exc
            raise Conflict(f"A plan named {name!r} already exists.") from exc
        plan.allowed_pools.set(found.values())
        audit_record(
            actor=actor,
            actor_label=actor_label,
            action=AuditLogEntry.Verb.ADD,
            obj=plan,
            before=None,
            after=audit_snapshot(plan),
        )
    return plan


def plan_get(*, name: str) -> Plan:
    """The plan named ``name``; :class:`NotFound` (naming the plans) if none."""
    plan = Plan.objects.filter(name=name).first()
    if plan is None:
        known = ", ".join(Plan.objects.values_list("name", flat=True)) or "none"
        raise NotFound(f"No plan named {name!r} (plans: {known}).")
    return plan


def subscription_assign(
    *, user: Any, plan_name: str, actor: Any = None, actor_label: str | None = None
) -> tuple[Subscription, Plan | None]:
    """Put ``user`` on the plan ``plan_name`` (their next request uses its limits).

    Returns the subscription and the plan they had before (None: no subscription, so
    the default plan). Raises :class:`NotFound` for an unknown plan. Audited as an
    add or a change of the subscription.
    """
    plan = plan_get(name=plan_name)
    with transaction.atomic():
        stored = (
            Subscription.objects.select_for_update()
            .select_related("plan")
            .filter(user=user)
            .first()
        )
        before = audit_snapshot(stored)
        previous = stored.plan if stored is not None else None
        if stored is None:
            subscription = Subscription.objects.create(user=user, plan=plan)
        else:
            subscription = stored
            subscription.plan = plan
            subscription.save(update_fields=["plan"])
        audit_record(
            actor=actor,
            actor_label=actor_label,
            action=AuditLogEntry.Verb.CHANGE if stored else AuditLogEntry.Verb.ADD,
            obj=subscription,
            before=before,
            after=audit_snapshot(subscription),
        )
    if hasattr(user, PLAN_ID_ATTR):  # a session's user: the rest of its request too
        setattr(user, PLAN_ID_ATTR, plan.pk)
    return subscription, previous


def user_quota_reset(
    *, user: Any, actor: Any = None, actor_label: str | None = None
) -> list[quota_reset.QuotaReset]:
    """Give ``user`` their whole budget back in the current minute, day and month.

    Requests in flight keep their reservations (:func:`gateway.quota_reset.quota_reset`).
    Audited as a change of the user with the tokens counted before and after, per
    window. Returns what each window went from and to (tokens).
    """
    done = quota_reset.quota_reset(user_id=user.pk)
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action=AuditLogEntry.Verb.CHANGE,
        obj=user,
        before={"quota_tokens_used": {r.name: r.before for r in done}},
        after={"quota_tokens_used": {r.name: r.after for r in done}},
    )
    return done

"""Routing and admission: which pool answers a request, and whether it can take it now.

Routing (:func:`pool_choose`), in order:
1. an explicit model choice (a pool name or model name), if the user's plan allows it;
2. the plan tier: the plan's allowed pools (none listed = every enabled pool);
3. a difficulty heuristic: a short, simple prompt goes to the cheapest allowed pool,
   anything else to the most capable one (largest context, then highest price).

Chat routing only ever picks chat pools; embedding requests are routed by
:func:`embedding_pool_choose` among embedding pools (``ModelPool.kind``). A request
naming a model of the other kind gets :class:`WrongModelKind` (400), which says which
endpoint serves it.

Admission (:func:`pool_admit`): a pool with no live worker, or with more waiting jobs
than its ``queue_threshold``, is saturated and the request follows its ``fallback`` chain;
when every pool of the chain is saturated the request is refused (503, ``Retry-After``).
Under pressure the lowest-priority plan is shed first: its requests see a threshold of
``queue_threshold * GATEWAY_SHED_FRACTION``; the evaluation plan (EVAL_PLAN_NAME) is
shed before every user, at ``queue_threshold * EVAL_SHED_FRACTION``.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from redis.exceptions import ResponseError

from chatsite.errors import Forbidden, InvalidInput, NotFound, PoolSaturated
from gateway import selectors
from gateway.models import ModelPool, Plan
from inference import keys, liveness, protocol
from inference.connections import redis_sync


class WrongModelKind(InvalidInput):
    """A request named a model of the other kind (400, ``param`` "model"): an
    embedding model in a chat completion, or a chat model in an embeddings request."""

    code = "wrong_model_kind"
    param = "model"

    @classmethod
    def for_chat(cls, requested: str) -> WrongModelKind:
        """The error for a chat request that named embedding model ``requested``."""
        return cls(
            f"“{requested}” is an embedding model: it turns text into vectors and "
            "cannot chat. Send it to POST /v1/embeddings, or choose a chat model "
            "(GET /v1/models gives each model's kind)."
        )

    @classmethod
    def for_embeddings(cls, requested: str) -> WrongModelKind:
        """The error for an embeddings request that named chat model ``requested``."""
        return cls(
            f"“{requested}” is a chat model, not an embedding model. Send it to "
            "POST /v1/chat/completions, or choose an embedding model "
            "(GET /v1/models gives each model's kind)."
        )


def _named(pools: list[ModelPool], requested: str) -> list[ModelPool]:
    """The enabled pools among ``pools`` whose name or model name is ``requested``."""
    return [p for p in pools if p.enabled and requested in (p.name, p.model)]


def prompt_is_simple(messages: list[dict[str, str]]) -> bool:
    """True for a short, simple last user message.

    Short: at most GATEWAY_SIMPLE_MAX_CHARS characters and 3 lines; simple: no code
    fence. A rule of thumb (DESIGN §4 step 2), tuned by those two settings.
    """
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    text = str(last.get("content", "")) if last else ""
    return (
        len(text) <= settings.GATEWAY_SIMPLE_MAX_CHARS
        and text.count("\n") < 3
        and "```" not in text
    )


def _price(pool: ModelPool) -> Decimal:
    return pool.price_input_per_1k + pool.price_output_per_1k


def pool_choose(
    *, plan: Plan, messages: list[dict[str, str]], requested: str | None = None
) -> ModelPool:
    """Return the chat pool a request should go to (before admission).

    ``requested`` is a pool name or model name. Only chat pools are candidates; with
    none in the database, the default pool (:func:`selectors.pool_default`). Raises
    WrongModelKind (400, ``requested`` is an embedding model), NotFound (no such
    enabled model), Forbidden (the plan does not include it, or includes no enabled
    chat pool).
    """
    config = selectors.gateway_config()
    chat = config.pools_of(kind=ModelPool.Kind.CHAT)
    if requested and not _named(chat, requested):
        if _named(config.pools_of(kind=ModelPool.Kind.EMBEDDING), requested):
            raise WrongModelKind.for_chat(requested)
    if not chat:
        return selectors.pool_default()
    allowed = selectors.plan_pools(plan=plan, kind=ModelPool.Kind.CHAT)
    if requested:
        wanted = _named(chat, requested)
        if not wanted:
            raise _model_not_found(
                f"The model “{requested}” does not exist or is not available."
            )
        for pool in wanted:
            if pool in allowed:
                return pool
        raise Forbidden(
            f"Your plan ({plan.name}) does not include the model “{requested}”.",
            code="model_not_allowed",
        )
    if not allowed:
        raise Forbidden(
            f"Your plan ({plan.name}) includes no model that is available now.",
            code="no_model_for_plan",
        )
    if prompt_is_simple(messages):
        return min(allowed, key=lambda p: (_price(p), p.max_context, p.name))
    return max(allowed, key=lambda p: (p.max_context, _price(p), p.name))


def _model_not_found(message: str) -> NotFound:
    """The 404 ``model_not_found`` naming the request's ``model`` field (OpenAI's
    ``param``)."""
    exc = NotFound(message, code="model_not_found")
    exc.param = "model"
    return exc


def embedding_pool_choose(*, plan: Plan, requested: str) -> ModelPool:
    """Return the embedding pool that serves ``requested`` (a pool or model name).

    Only enabled embedding pools are candidates, and the plan's ``allowed_pools``
    apply as for chat (:func:`selectors.plan_pools`). Raises WrongModelKind (400,
    ``requested`` is a chat model), NotFound (no such enabled embedding model),
    Forbidden (the plan does not include it).
    """
    config = selectors.gateway_config()
    wanted = _named(config.pools_of(kind=ModelPool.Kind.EMBEDDING), requested)
    if not wanted:
        chat = config.pools_of(kind=ModelPool.Kind.CHAT)
        if _named(chat, requested) or (
            not chat and requested == settings.INFERENCE_DEFAULT_POOL
        ):
            raise WrongModelKind.for_embeddings(requested)
        raise _model_not_found(
            f"The embedding model “{requested}” does not exist or is not available "
            "(GET /v1/models lists the models you can use)."
        )
    allowed = selectors.plan_pools(plan=plan, kind=ModelPool.Kind.EMBEDDING)
    for pool in wanted:
        if pool in allowed:
            return pool
    raise Forbidden(
        f"Your plan ({plan.name}) does not include the model “{requested}”.",
        code="model_not_allowed",
    )


def queue_waiting(*, pool: str) -> int:
    """Return how many jobs wait in ``pool``'s queue, not yet taken by a worker."""
    client = redis_sync()
    key = keys.queue_key(pool)
    try:
        groups = client.xinfo_groups(key)
    except ResponseError:  # no stream yet
        return 0
    group = next((g for g in groups if g.get("name") == protocol.GROUP), None)
    if group is None:
        return int(client.xlen(key))
    if group.get("lag") is not None:
        return int(group["lag"])
    last = group.get("last-delivered-id", "0-0")
    return len(client.xrange(key, f"({last}", "+") or [])


def pool_saturated(
    *,
    pool: ModelPool,
    shed: bool = False,
    fraction: float | None = None,
    load: tuple[int, int | None] | None = None,
) -> bool:
    """True if ``pool`` has no live worker or more waiting jobs than it accepts.

    With ``shed`` (a lowest-priority request under pressure) the accepted queue depth is
    ``queue_threshold * GATEWAY_SHED_FRACTION``; ``fraction`` (0-1) overrides that
    share (evaluation requests: EVAL_SHED_FRACTION, shed before any user). ``load``:
    the pool's :func:`inference.liveness.pool_load` when the caller read it already
    (None: read now).
    """
    # liveness and queue depth in one round trip (admission is on every request)
    live, waiting = load or liveness.pool_load(pool=pool.name)
    if live == 0:
        return True
    threshold = pool.queue_threshold
    if fraction is not None:
        threshold = int(threshold * fraction)
    elif shed:
        threshold = int(threshold * settings.GATEWAY_SHED_FRACTION)
    if waiting is None:  # Redis does not know the group's lag: count the entries
        waiting = queue_waiting(pool=pool.name)
    return waiting > threshold


def plan_is_lowest(*, plan: Plan) -> bool:
    """True if ``plan`` has the lowest priority of several distinct ones (shed first)."""
    lo, hi = selectors.gateway_config().priority_bounds
    return lo is not None and hi is not None and lo < hi and plan.priority <= lo


def plan_is_eval(*, plan: Plan) -> bool:
    """True for the evaluation plan (EVAL_PLAN_NAME): its requests are shed before any
    user's, at ``queue_threshold * EVAL_SHED_FRACTION`` waiting jobs."""
    return plan.name == settings.EVAL_PLAN_NAME


def pool_admit(
    *,
    pool: ModelPool,
    plan: Plan,
    fallback: bool = True,
    load: tuple[int, int | None] | None = None,
) -> ModelPool:
    """Return the first pool of ``pool``'s fallback chain that can take a request now.

    Disabled pools and embedding pools in the chain are skipped. ``fallback`` False
    admits ``pool`` itself or nothing (an evaluation measures that pool, not another).
    ``load``: ``pool``'s own load when the caller read it already
    (:func:`inference.liveness.pool_load`; the chain's other pools are read here).
    Raises PoolSaturated (503 with ``Retry-After: GATEWAY_SATURATED_RETRY_AFTER_S``)
    when none can.
    """
    shed = plan_is_lowest(plan=plan)
    fraction = settings.EVAL_SHED_FRACTION if plan_is_eval(plan=plan) else None
    seen: set[str] = set()
    current: ModelPool | None = pool
    while current is not None and current.name not in seen:
        seen.add(current.name)
        usable = current.pk is None or (
            current.enabled and current.kind == ModelPool.Kind.CHAT
        )
        if usable and not pool_saturated(
            pool=current,
            shed=shed,
            fraction=fraction,
            load=load if current is pool else None,
        ):
            return current
        if not fallback:
            break
        current = current.fallback if current.fallback_id else None
    retry = settings.GATEWAY_SATURATED_RETRY_AFTER_S
    raise PoolSaturated(
        "The assistant is busy right now (every model that could answer is at "
        f"capacity or offline). Please try again in about {retry} seconds.",
        headers={"Retry-After": str(retry)},
    )

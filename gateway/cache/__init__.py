"""Answer caches of the gateway: exact (Redis) and semantic (pgvector). A repeated
question answered from a cache costs no accelerator time and streams at once.

Which requests use them. Only a *cacheable* request reads or fills a cache: a
deterministic one (``temperature`` 0) or one that opts in (the ``cache`` param set to
true; the gateway strips it before enqueueing). A cached answer replaces sampling, so a
request at temperature > 0 that did not opt in always gets a freshly sampled answer
(:mod:`gateway.cache.policy`).

- Exact cache (:mod:`gateway.cache.exact`): the key is the SHA-256 of user, pool, the
  pool's model, the FULL rendered messages (system prompt and injected memory included)
  and the sampling parameters. Any difference in the prompt is a miss. Entries live
  GATEWAY_CACHE_TTL_S seconds.
- Semantic cache (:mod:`gateway.cache.semantic`): only single-turn prompts with no
  personal context (no facts, document passages or summary injected); the user message
  is embedded with all-MiniLM-L6-v2 and a stored prompt of the same scope with cosine
  similarity >= GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY answers it. Scope: user, model,
  SHA-256 of the system prompt, SHA-256 of the sampling parameters.

Both caches are per user: user B never receives user A's answer, not even for an
identical prompt (an identical hit would tell B that someone sent that exact prompt, a
side channel on A's injected memory). There is no tenant model; a tenant scope would
replace ``user`` in the key and the filter.

The flow (:mod:`gateway.cache.flow`). At admission the gateway prepares the request's
cache material (:func:`cache_prepare`), looks it up on the routed pool
(:func:`cache_lookup`) and, on a miss, keeps the material of the admitted pool under
the job id (:func:`cache_pending_store`). On a hit nothing is enqueued: the gateway
writes the cached answer as the job's generation stream itself (:func:`cache_serve`,
:mod:`gateway.cache.serve`: ``meta`` with ``"cache": kind``, ``token`` events in chunks,
``done``), so the SSE relay and finalisation run unchanged. When a generation is
settled, :func:`cache_settle` stores its answer if it is complete (status
``complete``, finish reason ``stop`` or ``length``; never errors, cancelled or
filtered answers, never a cache hit itself) and drops the material.

Usage and billing of a hit: its ``done`` event reports the usage of the generation that
wrote the answer (both caches keep it with the entry; for a semantic hit that is the
usage of the stored prompt, not of the paraphrase), with the whole prompt as
``cached_tokens``, so a client sees what the answer
cost when it was made and that all of it came from the cache. Billing follows the
plans, which charge only tokens an engine processed: a hit processed none, so the
reservation is released, the :class:`UsageRecord` has ``cache_hit=True``, zero tokens
and cost 0, and the quota is not charged.

The Redis keys (exact entries, pending material) are listed in :mod:`inference.keys`.
"""

from gateway.cache.exact import exact_digest
from gateway.cache.flow import (
    CACHEABLE_FINISH,
    cache_lookup,
    cache_pending_store,
    cache_pending_take,
    cache_settle,
)
from gateway.cache.policy import (
    CACHE_PARAM,
    CacheHit,
    CacheMaterial,
    CachePolicy,
    cache_prepare,
    params_hash,
    request_cacheable,
    single_turn,
)
from gateway.cache.semantic import semantic_cache_prune
from gateway.cache.serve import CACHE_WORKER, answer_chunks, cache_serve

__all__ = [
    "CACHEABLE_FINISH",
    "CACHE_PARAM",
    "CACHE_WORKER",
    "CacheHit",
    "CacheMaterial",
    "CachePolicy",
    "answer_chunks",
    "cache_lookup",
    "cache_pending_store",
    "cache_prepare",
    "cache_serve",
    "cache_pending_take",
    "cache_settle",
    "exact_digest",
    "params_hash",
    "request_cacheable",
    "semantic_cache_prune",
    "single_turn",
]

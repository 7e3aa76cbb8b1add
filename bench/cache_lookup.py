"""Answer-cache benchmark: what a cacheable request pays at admission (gateway/cache/).

    .venv/bin/python bench/cache_lookup.py [--entries 20000] [--users 100] [--queries 200]

Runs on the dev services (`make migrate` first), inside one transaction that is rolled
back at the end (semantic rows), on a scratch Redis key prefix it deletes (exact keys):
nothing stays behind. Prints, in ms (p50 / p99 over --queries lookups):

1. embedding one prompt (all-MiniLM-L6-v2, CPU): paid by every first-turn cacheable
   request (temperature 0 or opted in), hit or miss;
2. exact lookup (SHA-256 of the rendered request + one Redis GET);
3. semantic lookup (pgvector HNSW cosine, iterative scan, scoped to one user, model,
   system prompt and params) with --entries rows spread over --users users: each query
   is a stored vector plus noise, so most are hits.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start, option_parser  # noqa: E402
from bench.record import figures_record, pct  # noqa: E402


def report(name: str, ms: list[float], *, params: str) -> None:
    """Print p50/p99 of a list of milliseconds and record them (bench.record)."""
    print(f"{name:<28} p50 {statistics.median(ms):8.2f} ms   p99 {pct(ms, 99):8.2f} ms")
    figures = [(f"{name} p{q}", pct(ms, q), "ms", "") for q in (50, 99)]
    figures_record(bench="cache_lookup", params=params, figures=figures)


def main() -> None:
    """Run the three measurements and print them."""
    parser = option_parser(entries=20000, users=100, queries=200)
    args = parser.parse_args()

    django_start()
    import numpy as np
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from gateway import cache
    from gateway.cache import exact, policy, semantic
    from gateway.models import SemanticCacheEntry
    from inference.embeddings import EMBEDDING_DIM, embed_text

    prompts = [f"How do I do task number {i} in Python quickly?" for i in range(50)]
    embed_text("warm up")
    ms = []
    for i in range(min(args.queries, 50)):
        start = time.perf_counter()
        embed_text(prompts[i])
        ms.append((time.perf_counter() - start) * 1000)
    report("embed one prompt", ms, params="all-MiniLM-L6-v2, CPU")

    rng = np.random.default_rng(7)
    with transaction.atomic():
        users = [
            get_user_model().objects.create(username=f"bench-cache-{i}")
            for i in range(args.users)
        ]
        base = rng.normal(size=(args.entries, EMBEDDING_DIM)).astype(np.float32)
        base /= np.linalg.norm(base, axis=1, keepdims=True)
        params = {"temperature": 0, "max_tokens": 512}
        phash = cache.params_hash(params)
        system_hash = policy.sha256_json("You are helpful.")
        start = time.perf_counter()
        SemanticCacheEntry.objects.bulk_create(
            [
                SemanticCacheEntry(
                    user=users[i % args.users],
                    model="m",
                    system_hash=system_hash,
                    params_hash=phash,
                    prompt_hash=f"{i:064d}",
                    prompt=f"prompt {i}",
                    embedding=base[i].tolist(),
                    answer="answer",
                    finish_reason="stop",
                )
                for i in range(args.entries)
            ],
            batch_size=2000,
        )
        print(
            f"loaded {args.entries} entries for {args.users} users "
            f"in {time.perf_counter() - start:.1f} s"
        )
        messages = [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "q"},
        ]
        exact_ms, semantic_ms, hits = [], [], 0
        for _ in range(args.queries):
            i = int(rng.integers(args.entries))
            vector = base[i] + rng.normal(scale=0.01, size=EMBEDDING_DIM)
            vector /= np.linalg.norm(vector)
            material = cache.CacheMaterial(
                user_id=users[i % args.users].pk,
                messages=messages,
                params=params,
                semantic=True,
                prompt="q",
                system_hash=system_hash,
                vector=vector.astype(np.float32).tolist(),
            )
            start = time.perf_counter()
            exact.exact_get(
                exact.exact_digest(
                    user_id=material.user_id,
                    pool="bench",
                    model="m",
                    messages=messages,
                    params=params,
                )
            )
            exact_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            hit = semantic.semantic_get(material, "m")
            semantic_ms.append((time.perf_counter() - start) * 1000)
            hits += hit is not None
        shape = f"{args.entries} rows, {args.users} users, {args.queries} queries"
        report("exact lookup (miss)", exact_ms, params=shape)
        report("semantic lookup", semantic_ms, params=shape)
        print(f"semantic hits: {hits}/{args.queries}")
        transaction.set_rollback(True)


if __name__ == "__main__":
    main()

"""Retrieval benchmark: embedding throughput, top-5 latency, HNSW recall@5.

    .venv/bin/python bench/retrieval.py [--sizes 10000 100000] [--queries 200]

Runs on the dev services (`make migrate` first, or `make bench-retrieval`), inside one
transaction that is rolled back at the end: nothing stays in the database.

1. Embedding throughput (chunks/s): all-MiniLM-L6-v2 on this CPU over real English
   passages (docstrings of the installed Django package, chunked by memory.chunking to
   MEMORY_CHUNK_TOKENS tokens), batch size 64.
2. For each size N: N chunk vectors are made from those real embeddings (each a real
   passage vector plus Gaussian noise, re-normalised: clustered like real data, without
   embedding N passages on a CPU), bulk-loaded for one user, HNSW index built
   (m=16, ef_construction=64). Then for --queries query vectors (other real passages):
   - latency of memory.selectors.chunks_search(k=5) end to end (ORM, iterative scan,
     each --ef-search), p50/p99 in ms, measured in a pass of its own;
   - recall@5: |HNSW top-5 ∩ exact top-5| / 5, exact = the same query with index scans
     disabled (sequential scan + sort);
   - the same latency and recall for a user owning 1% of the rows (filtered search).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start, option_parser  # noqa: E402
from bench.corpus import docstrings  # noqa: E402
from bench.record import bench_record, pct  # noqa: E402

# Seconds the corpus' embedding request may take (a busy 2-core machine embeds a
# few hundred chunks per minute at worst).
EMBED_TIMEOUT_S = 300


def main() -> None:
    parser = option_parser(
        sizes=[10_000, 100_000], queries=200, passages=1500, ef_search=[40, 100, 200]
    )
    args = parser.parse_args()
    django_start()
    import numpy as np
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from inference.embeddings import embed_texts
    from memory import selectors
    from memory.chunking import text_chunk
    from memory.models import Document
    from tests.memory.factories import chunks_bulk_load, hnsw_index_build

    texts = docstrings(args.passages, min_chars=81)
    chunks = [
        c.text
        for t in texts
        for c in text_chunk(
            t,
            max_tokens=settings.MEMORY_CHUNK_TOKENS,
            overlap_tokens=settings.MEMORY_CHUNK_OVERLAP_TOKENS,
        )
    ]
    # The whole corpus is one request to the embedding worker: far more than a turn's
    # question, so it gets minutes, not the default few seconds (EMBEDDING_TIMEOUT_S).
    embed_texts(chunks[:64], timeout_s=EMBED_TIMEOUT_S)  # load + warm up
    started = time.perf_counter()
    # embed_texts returns an Embeddings (lists of floats): the sampling below wants
    # one float32 matrix, a row per chunk
    real = np.asarray(
        embed_texts(chunks, timeout_s=EMBED_TIMEOUT_S).vectors, dtype=np.float32
    )
    took = time.perf_counter() - started
    print(
        f"embedding: {len(chunks)} chunks (<= {settings.MEMORY_CHUNK_TOKENS} tokens, "
        f"mean {statistics.mean(len(c) for c in chunks):.0f} chars) in {took:.1f} s "
        f"= {len(chunks) / took:.1f} chunks/s"
    )
    bench_record(
        bench="retrieval",
        metric="embedding throughput",
        value=len(chunks) / took,
        unit="chunks/s",
        params=f"{len(chunks)} chunks, batch 64, CPU",
    )
    rng = np.random.default_rng(0)
    queries_base = real[: args.queries]
    corpus_base = real[args.queries :]
    User = get_user_model()
    for n in args.sizes:
        with transaction.atomic():
            owner, _ = User.objects.get_or_create(username="bench-retrieval")
            small, _ = User.objects.get_or_create(username="bench-retrieval-small")
            picks = corpus_base[rng.integers(0, len(corpus_base), n)]
            noise = rng.standard_normal(picks.shape).astype(np.float32)
            noise *= 0.6 / np.sqrt(picks.shape[1])
            vectors = picks + noise
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            n_small = n // 100
            t0 = time.perf_counter()
            chunks_bulk_load(
                document=Document.objects.create(
                    user=owner, title="bench", content_type="txt", status="ready"
                ),
                vectors=vectors[n_small:],
                build_index=False,
            )
            chunks_bulk_load(
                document=Document.objects.create(
                    user=small, title="bench-small", content_type="txt", status="ready"
                ),
                vectors=vectors[:n_small],
                build_index=False,
            )
            t1 = time.perf_counter()
            hnsw_index_build()
            t2 = time.perf_counter()
            print(
                f"\nN={n:,}: load {t1 - t0:.1f} s, HNSW build {t2 - t1:.1f} s "
                f"({n_small:,} rows belong to the 1% user)"
            )
            qs = queries_base + rng.standard_normal(queries_base.shape).astype(
                np.float32
            ) * (0.3 / np.sqrt(queries_base.shape[1]))
            qs /= np.linalg.norm(qs, axis=1, keepdims=True)
            runs = [(f"all rows, ef_search={ef}", owner, ef) for ef in args.ef_search]
            runs.append(("1% user", small, settings.MEMORY_HNSW_EF_SEARCH))
            for label, user, ef in runs:
                # Latency first, in its own pass: the exact scans below read the whole
                # table and would evict the index from shared_buffers between queries.
                lat: list[float] = []
                found: list[set[int]] = []
                for q in qs:
                    s = time.perf_counter()
                    hits = selectors.chunks_search(
                        user=user, vector=q.tolist(), k=5, ef_search=ef
                    )
                    lat.append((time.perf_counter() - s) * 1000)
                    found.append({h.chunk.id for h in hits})
                with transaction.atomic(), connection.cursor() as c:
                    c.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                    c.execute(f"SET LOCAL hnsw.ef_search = {int(ef)}")
                    c.execute(
                        "EXPLAIN SELECT id FROM memory_chunk WHERE user_id = %s "
                        "ORDER BY embedding <=> %s::vector LIMIT 5",
                        [user.id, str(qs[0].tolist())],
                    )
                    plan_text = " ".join(r[0] for r in c.fetchall())
                    transaction.set_rollback(True)  # undo the SET LOCALs
                plan = (
                    "HNSW index"
                    if "chunk_embedding_hnsw" in plan_text
                    else "exact: btree/seq scan + sort"
                )
                recall: list[float] = []
                for q, got in zip(qs, found, strict=True):
                    with transaction.atomic(), connection.cursor() as c:
                        c.execute("SET LOCAL enable_indexscan = off")
                        c.execute("SET LOCAL enable_bitmapscan = off")
                        c.execute(
                            "SELECT id FROM memory_chunk WHERE user_id = %s "
                            "ORDER BY embedding <=> %s::vector LIMIT 5",
                            [user.id, str(q.tolist())],
                        )
                        exact = {r[0] for r in c.fetchall()}
                        # roll the savepoint back: a released one keeps SET LOCAL
                        # (index scans off) for the rest of the outer transaction
                        transaction.set_rollback(True)
                    recall.append(len(exact & got) / 5)
                print(
                    f"  top-5 ({label}): p50 {pct(lat, 50):.1f} ms, "
                    f"p99 {pct(lat, 99):.1f} ms, recall@5 {statistics.mean(recall):.3f}"
                    f" over {len(qs)} queries [plan: {plan}]"
                )
                shape = f"N={n}, {label}, {len(qs)} queries"
                for metric, value, unit in (
                    ("top-5 p50", pct(lat, 50), "ms"),
                    ("top-5 p99", pct(lat, 99), "ms"),
                    ("recall@5", statistics.mean(recall), ""),
                ):
                    bench_record(
                        bench="retrieval",
                        metric=metric,
                        value=value,
                        unit=unit,
                        params=shape,
                    )
            transaction.set_rollback(True)


if __name__ == "__main__":
    main()

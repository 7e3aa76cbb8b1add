"""Inference settings (DESIGN §5, §8, §11: the queue and its streams, SSE framing,
embeddings, worker heartbeats and metrics), kept apart from base.py, which star-imports
them where they stood, so that each settings module reads as one subject. Values come
from the same django-environ ``env``."""

from pathlib import Path

from chatsite.settings.environment import VAR_DIR, env

# --- Inference tier -------------------------------------------------------------------
INFERENCE_DEFAULT_POOL = env("INFERENCE_DEFAULT_POOL", default="default")
# A job not picked up by a worker within this many seconds is dropped with an error event.
INFERENCE_QUEUE_TIMEOUT_S = env.float("INFERENCE_QUEUE_TIMEOUT_S", default=60.0)
# With no live worker in the pool, the stream reports an error after this many seconds.
INFERENCE_NO_WORKER_GRACE_S = env.float("INFERENCE_NO_WORKER_GRACE_S", default=15.0)
# A stream with no client attached is cancelled after this many seconds (DESIGN §4.6).
INFERENCE_DETACH_GRACE_S = env.float("INFERENCE_DETACH_GRACE_S", default=10.0)
# Generation streams are kept this long after their terminal event (reconnects, reaper).
INFERENCE_STREAM_TTL_S = env.int("INFERENCE_STREAM_TTL_S", default=3600)
# SSE heartbeat comment interval (DESIGN §8: every 15 s).
SSE_HEARTBEAT_S = env.float("SSE_HEARTBEAT_S", default=15.0)
# A streamed answer is released at most once per this many ms (the first token at
# once): each frame costs the web process the same whether it carries one token or
# five, so at 20 ms per token 50 ms makes 2-3 tokens a frame (DESIGN §8 allows
# coalescing). 0: a frame per read of the stream.
SSE_COALESCE_MS = env.float("SSE_COALESCE_MS", default=50.0)
# Under load the interval grows so the process sends at most about SSE_FRAMES_PER_S
# token frames a second over all its streams (interval = open streams / this rate,
# from 700 streams on), up to SSE_COALESCE_MAX_MS. The interval is the frame gap's
# floor: at 8,000 frames/s 1,500 streams got a frame every 187 ms and the gap's p99
# passed 250 ms in every run (400-535 ms, web core 54-80 % busy); at 14,000 every
# 107 ms (p99 173-232 ms). The price: uvicorn with our relay costs 50-70 us a frame,
# so 1,000 streams take 0.53 of a core, not 0.40 (bench/results/2026-12-05-frame-budget.md).
SSE_FRAMES_PER_S = env.float("SSE_FRAMES_PER_S", default=14000.0)
SSE_COALESCE_MAX_MS = env.float("SSE_COALESCE_MAX_MS", default=200.0)
# The web process's cyclic garbage collector thresholds (gc.set_threshold: young
# allocations, then young and middle collections). Python's default (700, 10, 10)
# collects after every 700 container allocations; a hub round's XREAD reply of 1,000
# streams allocates thousands of lists, so collections of the middle and old
# generations (every object made since start-up) ran several times a round: 60 % of
# the web's CPU per SSE frame at 1,000 streams (bench/results/2026-12-05-frame.md).
WEB_GC_THRESHOLDS = tuple(
    int(part) for part in env("WEB_GC_THRESHOLDS", default="100000,20,10").split(",")
)
# --- Embeddings: served by the embedding pool's workers, never in the web process -------
# The pool whose workers embed (run_inference_worker --engine sentence-transformers).
EMBEDDING_POOL = env("EMBEDDING_POOL", default="embed")
# How long an interactive caller (a turn, a fact, an API request) waits for vectors, s.
EMBEDDING_TIMEOUT_S = env.float("EMBEDDING_TIMEOUT_S", default=5.0)
# How long document ingestion (Celery) waits for one batch of chunk vectors, s.
EMBEDDING_INGEST_TIMEOUT_S = env.float("EMBEDDING_INGEST_TIMEOUT_S", default=120.0)
# Chunks per embedding job when a document is ingested.
EMBEDDING_INGEST_BATCH = env.int("EMBEDDING_INGEST_BATCH", default=64)
# Embedding workers: how long a batch waits for more jobs after the first when more
# were queued with it (ms; a lone job runs at once), and the most texts in one pass.
EMBEDDING_GATHER_MS = env.float("EMBEDDING_GATHER_MS", default=2.0)
EMBEDDING_MAX_BATCH = env.int("EMBEDDING_MAX_BATCH", default=64)
# Bulk work (ingestion, large API requests) runs this many texts per batch, and only
# when no interactive job waits: a question waits behind at most one such batch.
EMBEDDING_BULK_BATCH = env.int("EMBEDDING_BULK_BATCH", default=16)
# Texts per embed job: a long request is split so one job never holds a worker long.
EMBEDDING_JOB_MAX_TEXTS = env.int("EMBEDDING_JOB_MAX_TEXTS", default=16)

# --- Inference workers and metrics (DESIGN §5, §11) -----------------------------------
# Workers beat every INFERENCE_HEARTBEAT_S s; one silent for INFERENCE_WORKER_TTL_S s is
# dead, and every INFERENCE_RECLAIM_S s live workers take over its pending jobs.
INFERENCE_HEARTBEAT_S = env.float("INFERENCE_HEARTBEAT_S", default=2.0)
INFERENCE_WORKER_TTL_S = env.float("INFERENCE_WORKER_TTL_S", default=10.0)
INFERENCE_RECLAIM_S = env.float("INFERENCE_RECLAIM_S", default=5.0)
# Conversation affinity (inference/affinity.py): a conversation's next turn goes to the
# worker that served its previous one (its engine's prefix cache holds the history)
# when that worker is live and has a free slot; off: every job goes to the pool's queue.
INFERENCE_AFFINITY = env.bool("INFERENCE_AFFINITY", default=True)
# A job its preferred worker has not taken within this many seconds goes to the pool.
INFERENCE_AFFINITY_WAIT_S = env.float("INFERENCE_AFFINITY_WAIT_S", default=2.0)
# How long a conversation remembers its worker after a turn (s).
INFERENCE_AFFINITY_TTL_S = env.int("INFERENCE_AFFINITY_TTL_S", default=1800)
# A llama.cpp worker keeps the KV states of recent prompts, up to this many MiB (about
# 23 KiB a token for SmolLM2-135M), so the conversations it serves in turn each resume
# from their history (inference/engines/llamacpp_cache.py); 0: none.
LLAMACPP_PROMPT_CACHE_MB = env.int("LLAMACPP_PROMPT_CACHE_MB", default=128)
# prometheus_client multiprocess mode: every process (web, workers) writes its samples to
# files in this folder and /metrics aggregates them. prometheus_client reads the variable
# when first imported, so it is exported here; `make run` empties the folder at start.
PROMETHEUS_MULTIPROC_DIR = env(
    "PROMETHEUS_MULTIPROC_DIR", default=str(VAR_DIR / "prometheus")
)
env.ENVIRON["PROMETHEUS_MULTIPROC_DIR"] = PROMETHEUS_MULTIPROC_DIR
Path(PROMETHEUS_MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)
# /metrics is served to staff users, to requests from these addresses (a scraper on the
# same host; empty it when a reverse proxy on this host forwards public traffic), and to
# `Authorization: Bearer METRICS_TOKEN` when that is set.
METRICS_ALLOWED_IPS = env.list("METRICS_ALLOWED_IPS", default=["127.0.0.1", "::1"])
METRICS_TOKEN = env("METRICS_TOKEN", default="")

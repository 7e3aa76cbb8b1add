"""Prometheus metrics of the inference tier (DESIGN §11), multiprocess-safe.

Workers record; the web process serves (:func:`metrics_render`, view ``/metrics``).
Every process writes its samples to memory-mapped files in ``PROMETHEUS_MULTIPROC_DIR``
(``prometheus_client`` multiprocess mode); the settings set that variable (default
``.var/prometheus``) before ``prometheus_client`` is first imported, and ``make run``
empties the folder at start. Names follow vLLM's where vLLM has one, with its
``model_name`` label plus our ``pool`` label; times are seconds, counts are tokens.

- ``vllm:time_to_first_token_seconds``: enqueue → first token (histogram).
- ``vllm:inter_token_latency_seconds``: between two streamed deltas (histogram).
- ``vllm:e2e_request_latency_seconds``: enqueue → terminal event (histogram).
- ``vllm:request_queue_time_seconds``: enqueue → taken by a worker (histogram).
- ``vllm:num_requests_running``: jobs in engine slots (gauge, summed over live workers).
- ``vllm:num_requests_waiting``: jobs queued and not yet taken (gauge, the pool's
  latest sample, taken by workers at each heartbeat).
- ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``: exact engine counts.
- ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``: prompt tokens
  looked up / found in the KV cache.
- ``vllm:request_success_total{finished_reason}``: generations that ended with ``done``.
- ``inference:requests_aborted_total``: generations stopped by a cancel (user stop,
  no client left, shutdown); ``inference:request_errors_total{code}``: ``error`` ends;
  ``inference:requests_retried_total``: jobs re-queued by crash recovery.
- ``inference:affinity_routes_total{pool, outcome}``: generations that carry a
  conversation's affinity, by where the submitter sent them: ``hit`` (the worker
  that served the conversation's previous turn), ``miss_new`` (none recorded),
  ``miss_dead`` (its heartbeat is stale or it stops), ``miss_saturated`` (its slots
  are taken); every miss goes to the pool's queue (:mod:`inference.affinity`).
- ``inference:affinity_fallbacks_total{pool}``: jobs sent to a worker's own stream
  (counted as ``hit``) that it had not taken within INFERENCE_AFFINITY_WAIT_S, moved
  to the pool's queue.
- ``chatsite:feedback_total{model_name, rating}``: thumbs up/down given to answers
  (recorded by the web process, :mod:`conversations.services.feedback`).
- Embedding pools record the queue time, e2e latency, prompt tokens, running requests
  and ``request_success{finished_reason="embedding"}`` above, plus
  ``inference:embedding_batch_texts``: texts per forward pass (dynamic batching).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics_core import Metric

LABELS = ("model_name", "pool")

# Buckets in seconds: vLLM's for TTFT / ITL, a coarser ladder for whole requests.
_TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_ITL_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
)
_REQUEST_BUCKETS = (
    0.05,
    0.1,
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
)

TIME_TO_FIRST_TOKEN = Histogram(
    "vllm:time_to_first_token_seconds",
    "Time from enqueue to the first generated token, in seconds.",
    LABELS,
    buckets=_TTFT_BUCKETS,
)
INTER_TOKEN_LATENCY = Histogram(
    "vllm:inter_token_latency_seconds",
    "Time between two streamed deltas of one generation, in seconds.",
    LABELS,
    buckets=_ITL_BUCKETS,
)
E2E_LATENCY = Histogram(
    "vllm:e2e_request_latency_seconds",
    "Time from enqueue to the terminal event, in seconds.",
    LABELS,
    buckets=_REQUEST_BUCKETS,
)
QUEUE_TIME = Histogram(
    "vllm:request_queue_time_seconds",
    "Time a job waited in its pool's queue before a worker took it, in seconds.",
    LABELS,
    buckets=_REQUEST_BUCKETS,
)
REQUESTS_RUNNING = Gauge(
    "vllm:num_requests_running",
    "Jobs running in engine slots.",
    LABELS,
    multiprocess_mode="livesum",
)
REQUESTS_WAITING = Gauge(
    "vllm:num_requests_waiting",
    "Jobs queued in the pool and not yet taken by a worker.",
    ("pool",),
    multiprocess_mode="mostrecent",
)
PROMPT_TOKENS = Counter(
    "vllm:prompt_tokens", "Prompt tokens processed (exact, engine tokenizer).", LABELS
)
GENERATION_TOKENS = Counter(
    "vllm:generation_tokens", "Tokens generated (exact, engine count).", LABELS
)
PREFIX_CACHE_QUERIES = Counter(
    "vllm:prefix_cache_queries", "Prompt tokens looked up in the KV cache.", LABELS
)
PREFIX_CACHE_HITS = Counter(
    "vllm:prefix_cache_hits", "Prompt tokens found in the KV cache.", LABELS
)
REQUEST_SUCCESS = Counter(
    "vllm:request_success",
    "Generations that ended with a done event, by finish reason.",
    (*LABELS, "finished_reason"),
)
REQUESTS_ABORTED = Counter(
    "inference:requests_aborted",
    "Generations stopped by a cancel (user stop, no client attached, shutdown).",
    LABELS,
)
REQUEST_ERRORS = Counter(
    "inference:request_errors",
    "Generations that ended with an error event, by error code.",
    (*LABELS, "code"),
)
EMBEDDING_BATCH_TEXTS = Histogram(
    "inference:embedding_batch_texts",
    "Texts embedded together in one forward pass of an embedding worker.",
    LABELS,
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
REQUESTS_RETRIED = Counter(
    "inference:requests_retried",
    "Jobs re-queued by crash recovery after their worker died before any token.",
    ("pool",),
)
AFFINITY_ROUTES = Counter(
    "inference:affinity_routes",
    "Generations with a conversation affinity, by routing outcome "
    "(hit, miss_new, miss_dead, miss_saturated).",
    ("pool", "outcome"),
)
AFFINITY_FALLBACKS = Counter(
    "inference:affinity_fallbacks",
    "Jobs a preferred worker left in its own stream past the bound, moved to the pool.",
    ("pool",),
)

FEEDBACK = Counter(
    "chatsite:feedback",
    "Ratings given to answers (thumbs up/down), by the model that answered.",
    ("model_name", "rating"),
)


class _FilesCollector:
    """``MultiProcessCollector`` that passes over empty sample files.

    prometheus_client creates a process's file and sizes it after (to 1 MiB, never
    back to 0), so a process killed in between (SIGKILL, the OOM killer; seen in the
    tests under load) leaves an empty file for good, and the stock collector fails on
    it at every scrape after (``struct.error: unpack_from requires a buffer of at least
    4 bytes``, aborting the whole merge: prometheus/client_python#1199, open for
    0.26.0). An empty file holds no sample, so passing over it loses nothing; a file
    of a live process that is still empty is read at the next scrape.
    """

    def __init__(self, path: str) -> None:
        self._path = path

    def collect(self) -> Iterable[Metric]:
        files = []
        for name in glob.glob(os.path.join(self._path, "*.db")):
            try:
                if os.path.getsize(name) > 0:
                    files.append(name)
            except FileNotFoundError:  # a live gauge's file, its process just ended
                continue
        return multiprocess.MultiProcessCollector.merge(files, accumulate=True)


def metrics_render() -> tuple[bytes, str]:
    """Return the Prometheus text exposition of every process's samples, and its type.

    Aggregates the files of ``PROMETHEUS_MULTIPROC_DIR`` when it is set (the normal
    case; empty files of killed processes passed over, :class:`_FilesCollector`),
    else this process's default registry.
    """
    if path := os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        registry.register(_FilesCollector(path))
        return generate_latest(registry), CONTENT_TYPE_LATEST
    from prometheus_client import REGISTRY

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def process_exited(pid: int | None = None) -> None:
    """Drop the live-gauge files of a process that ends (call once at clean exit)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid or os.getpid())

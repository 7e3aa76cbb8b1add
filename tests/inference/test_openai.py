"""The ``openai`` engine against a real OpenAI-compatible server process
(inference/engines/openai.py): llama-cpp-python's server on the bundled SmolLM2 GGUF.

llama-cpp-python's server streams one chunk per token but sends no usage chunk, so
usage comes from the engine's fallback (content chunks); the test checks it against the
server's own non-streamed usage for the same deterministic request.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inference.engines import engine_create
from inference.engines.base import Delta, EngineError, Finish
from inference.engines.llamacpp_prompt import bundled_model_path
from inference.engines.openai import OpenAIEngine
from inference.protocol import Job

pytestmark = pytest.mark.slow

MODEL_NAME = "smollm2"
QUESTION = [{"role": "user", "content": "Name three colours of the rainbow."}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A llama-cpp-python OpenAI-compatible server subprocess and its log file."""

    def __init__(self, tmp: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "llama-server.log"
        self.log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(bundled_model_path()),
                "--model_alias",
                MODEL_NAME,
                "--n_ctx",
                "2048",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()[-2000:]
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError("llama.cpp server did not start")

    def log_text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("openai"))
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def _job(job_id: str, **params: object) -> Job:
    return Job(
        job_id=job_id,
        messages=QUESTION,
        params={"temperature": 0.0, "top_p": 1.0, **params},
    )


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


def test_engine_create_builds_an_openai_engine_with_a_v1_base_url():
    engine = engine_create("openai", base_url="http://h:1/v1/", model="m")
    assert isinstance(engine, OpenAIEngine)
    assert engine.base_url == "http://h:1"
    assert engine.model == "m"


def test_streams_deltas_and_counts_completion_tokens_like_the_server(server):
    engine = OpenAIEngine(base_url=server.url + "/v1", model=MODEL_NAME)
    deltas, finish = asyncio.run(_collect(engine, _job("s1", max_tokens=24)))

    reference = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={
            "model": MODEL_NAME,
            "messages": QUESTION,
            "max_tokens": 24,
            "temperature": 0.0,
            "top_p": 1.0,
        },
        timeout=60,
    ).json()
    assert len(deltas) > 3  # streamed piece by piece, not in one block
    assert "".join(deltas) == reference["choices"][0]["message"]["content"]
    assert finish.finish_reason == reference["choices"][0]["finish_reason"]
    assert finish.usage.completion_tokens == reference["usage"]["completion_tokens"]


def test_abort_closes_the_stream_and_the_server_stops_generating(server):
    engine = OpenAIEngine(base_url=server.url, model=MODEL_NAME)
    job = _job("long", max_tokens=1500)
    log_before = server.log_text().count("Disconnected from client")

    async def scenario() -> tuple[int, Finish, float]:
        await engine.start()
        try:
            seen = 0
            finish = None
            asked = 0.0
            async for item in engine.generate(job):
                if isinstance(item, Delta):
                    seen += 1
                    if seen == 5:
                        asked = time.monotonic()
                        engine.abort(job.job_id)
                else:
                    finish = item
            assert finish is not None
            return seen, finish, time.monotonic() - asked
        finally:
            await engine.close()

    seen, finish, took_s = asyncio.run(scenario())

    assert finish.finish_reason == "cancelled"
    assert took_s < 1.0
    assert 5 <= seen < 1500
    assert finish.usage.completion_tokens == seen
    # the server saw the client go away and stopped the generation
    deadline = time.time() + 10
    while server.log_text().count("Disconnected from client") <= log_before:
        assert time.time() < deadline, server.log_text()[-2000:]
        time.sleep(0.1)


def test_abort_before_the_request_finishes_cancelled_without_a_request(server):
    engine = OpenAIEngine(base_url=server.url, model=MODEL_NAME)
    engine.abort("early")
    deltas, finish = asyncio.run(_collect(engine, _job("early", max_tokens=50)))
    assert deltas == []
    assert finish.finish_reason == "cancelled"
    assert finish.usage.completion_tokens == 0


def test_unreachable_server_raises_engine_error():
    engine = OpenAIEngine(
        base_url=f"http://127.0.0.1:{_free_port()}",
        model=MODEL_NAME,
        connect_timeout_s=1.0,
    )
    with pytest.raises(EngineError, match="failed"):
        asyncio.run(_collect(engine, _job("down")))


def test_http_error_status_raises_engine_error(server):
    engine = OpenAIEngine(base_url=server.url, model=MODEL_NAME)
    job = _job("bad", max_tokens=50)
    job.messages = [{"role": "nobody", "content": "x"}]
    with pytest.raises(EngineError, match=r"answered [45]\d\d") as err:
        asyncio.run(_collect(engine, job))
    assert err.value.code == "engine_error"


def test_stream_broken_off_by_the_server_raises_engine_error(server):
    # llama.cpp's server checks the context only once streaming has begun: it then
    # ends the stream without a finish reason or [DONE]
    engine = OpenAIEngine(base_url=server.url, model=MODEL_NAME)
    job = _job("huge", max_tokens=50)
    job.messages = [{"role": "user", "content": "word " * 4000}]
    with pytest.raises(EngineError, match="mid-answer"):
        asyncio.run(_collect(engine, job))


def test_worker_command_needs_a_base_url_and_model_for_the_openai_engine():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="--base-url and --model"):
        call_command("run_inference_worker", "--engine", "openai", "--model", "m")

"""The vLLM engine for real: vLLM CPU on SmolLM2 converted from the bundled GGUF
(inference/engines/vllm.py).

Runs in the vLLM venv (``make test-vllm``, which sets ``REQUIRE_VLLM=1`` so a broken
install fails instead of skipping); in the main venv, without vllm, it is skipped. One
engine (one vLLM engine-core process) serves the whole module on a background event
loop, so vLLM starts once.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from inference import client as inference_client
from inference import protocol
from inference.engines.base import Delta, EngineError, Finish, ToolCallDelta
from inference.params import ERROR_INVALID_PARAMETER
from inference.protocol import Job
from inference.worker import Worker
from tests.inference.helpers import terminal, wait_events

try:
    import vllm  # noqa: F401
except ImportError:
    if os.environ.get("REQUIRE_VLLM") == "1":
        raise
    pytest.skip(
        "vllm is not installed here (run `make test-vllm`)", allow_module_level=True
    )

from inference.engines.vllm import VllmEngine  # noqa: E402
from inference.engines.vllm_tools import tools_normalised  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MODEL_DIR = Path(os.environ.get("VLLM_TEST_MODEL", ".var/models/smollm2-hf"))
START_TIMEOUT_S = 600  # vLLM imports torch in three processes; the CPU is shared
STEP_TIMEOUT_S = 120


class LoopThread:
    """An asyncio loop in a background thread that tests submit coroutines to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        """Run ``coro`` on the loop; return its result (fail after ``timeout`` s)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def vllm_engine() -> Iterator[tuple[VllmEngine, LoopThread]]:
    """A started VllmEngine (max 8 concurrent requests) and the loop it lives on."""
    if not (MODEL_DIR / "config.json").exists():
        pytest.fail(f"{MODEL_DIR} missing: run scripts/smollm2_hf.py (make test-vllm)")
    lt = LoopThread()
    engine = VllmEngine(model_dir=str(MODEL_DIR), max_concurrency=8, kv_cache_gib=1)
    lt.run(engine.start(), START_TIMEOUT_S)
    yield engine, lt
    lt.run(engine.close(), 60)
    lt.stop()


def _job(content: str, *, system: str | None = None, **params: Any) -> Job:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": content})
    return Job(
        job_id=f"t-{uuid.uuid4().hex[:8]}",
        messages=messages,
        params={"temperature": 0.0, **params},
    )


async def _collect(
    engine: VllmEngine, job: Job, stamps: list[float] | None = None
) -> tuple[str, Finish]:
    text: list[str] = []
    finish: Finish | None = None
    async for item in engine.generate(job):
        if isinstance(item, Delta):
            text.append(item.text)
            if stamps is not None:
                stamps.append(time.monotonic())
        else:
            finish = item
    assert finish is not None, "generation ended without a Finish"
    return "".join(text), finish


def test_concurrent_jobs_are_batched_and_all_streams_progress_together(vllm_engine):
    engine, lt = vllm_engine
    n, max_tokens = 4, 40
    jobs = [
        _job(f"Write a long story about a cat named {name}.", max_tokens=max_tokens)
        for name in ("Tom", "Ada", "Max", "Zoe")
    ]
    for job in jobs:
        job.params["ignore_eos"] = True  # every stream runs its full length
    stamps: list[list[float]] = [[] for _ in range(n)]
    engine.counts.max_running = 0

    async def scenario() -> list[tuple[str, Finish]]:
        return await asyncio.gather(
            *(_collect(engine, job, stamps[i]) for i, job in enumerate(jobs))
        )

    results = lt.run(scenario(), STEP_TIMEOUT_S)

    for (text, finish), job in zip(results, jobs, strict=True):
        assert text
        assert finish.finish_reason == "length"
        assert finish.usage.completion_tokens == max_tokens
        assert finish.usage.prompt_tokens == engine.count_tokens(job.messages)
    # the scheduler ran all of them in the same decode steps
    assert engine.counts.max_running == n
    # every stream had its first token before any stream finished...
    assert max(s[0] for s in stamps) < min(s[-1] for s in stamps)
    # ...and the streams interleave token by token instead of one after another
    timeline = sorted((t, i) for i, s in enumerate(stamps) for t in s)
    switches = sum(1 for a, b in itertools.pairwise(timeline) if a[1] != b[1])
    assert switches >= n * (max_tokens // 4)


def test_abort_frees_the_request_in_the_engine_at_once(vllm_engine):
    engine, lt = vllm_engine
    jobs = [
        _job(f"Tell me everything about the number {i}.", max_tokens=1500)
        for i in range(3)
    ]
    for job in jobs:
        job.params["ignore_eos"] = True
    seen = [0, 0, 0]

    async def scenario() -> dict[str, Any]:
        async def run(i: int, job: Job) -> Finish:
            finish = None
            async for item in engine.generate(job):
                if isinstance(item, Delta):
                    seen[i] += 1
                else:
                    finish = item
            return finish

        tasks = [asyncio.create_task(run(i, job)) for i, job in enumerate(jobs)]
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while min(seen) < 3 or engine.counts.running < 3:
            assert time.monotonic() < deadline, (seen, vars(engine.counts))
            await asyncio.sleep(0.02)
        before = {
            "running": engine.counts.running,
            "unfinished": engine.unfinished_requests(),
        }
        asked = time.monotonic()
        engine.abort(jobs[0].job_id)
        aborted = await asyncio.wait_for(tasks[0], 10)
        took_s = time.monotonic() - asked
        unfinished_after = engine.unfinished_requests()
        # the scheduler (engine-core process) drops it at its next step
        while engine.counts.running != 2:
            assert time.monotonic() < asked + 10, vars(engine.counts)
            await asyncio.sleep(0.01)
        others_done = [t.done() for t in tasks[1:]]
        for job in jobs[1:]:
            engine.abort(job.job_id)
        rest = await asyncio.wait_for(asyncio.gather(*tasks[1:]), 30)
        return {
            "before": before,
            "aborted": aborted,
            "took_s": took_s,
            "unfinished_after": unfinished_after,
            "others_done": others_done,
            "rest": rest,
        }

    r = lt.run(scenario(), STEP_TIMEOUT_S * 2)

    assert r["before"] == {"running": 3, "unfinished": 3}
    assert r["aborted"].finish_reason == "cancelled"
    assert r["took_s"] < 5
    assert 3 <= r["aborted"].usage.completion_tokens < 1500
    assert r["unfinished_after"] == 2
    assert r["others_done"] == [False, False]  # the others kept generating
    assert all(f.finish_reason == "cancelled" for f in r["rest"])
    assert engine.unfinished_requests() == 0


def test_shared_system_prompt_hits_the_prefix_cache_on_the_second_request(
    vllm_engine,
):
    engine, lt = vllm_engine
    nonce = uuid.uuid4().hex  # nothing cached from earlier tests
    system = f"Session {nonce}. You are a careful assistant for a bakery. " + (
        "Answer politely, briefly and only about bread, cakes and opening hours. " * 25
    )
    first = _job("When do you open?", system=system, max_tokens=8)
    second = _job("Do you sell rye bread?", system=system, max_tokens=8)

    _, f1 = lt.run(_collect(engine, first), STEP_TIMEOUT_S)
    hits_before = engine.counts.prefix_cache_hits
    _, f2 = lt.run(_collect(engine, second), STEP_TIMEOUT_S)

    shared = engine.count_tokens([{"role": "system", "content": system}])
    assert f1.usage.prompt_tokens > 300
    assert f1.usage.cached_tokens == 0
    # whole KV blocks of the shared system prompt are reused
    assert f2.usage.cached_tokens > 0
    assert shared // 2 < f2.usage.cached_tokens <= shared
    assert engine.counts.prefix_cache_hits >= hits_before + f2.usage.cached_tokens


def test_abort_before_start_finishes_cancelled_without_running(vllm_engine):
    engine, lt = vllm_engine
    job = _job("Hello!", max_tokens=50)
    engine.abort(job.job_id)
    text, finish = lt.run(_collect(engine, job), STEP_TIMEOUT_S)
    assert text == ""
    assert finish.finish_reason == "cancelled"
    assert finish.usage.completion_tokens == 0
    assert finish.usage.prompt_tokens == engine.count_tokens(job.messages)


def test_worker_serves_concurrent_jobs_and_a_cancel_with_the_vllm_engine(
    vllm_engine, monkeypatch
):
    engine, lt = vllm_engine
    # the module's engine outlives this worker
    monkeypatch.setattr(engine, "close", _noop)
    pool = "vllm-test"
    worker = Worker(
        pool=pool, engine=engine, redis_url=settings.REDIS_URL, heartbeat_s=0.5
    )
    running = asyncio.run_coroutine_threadsafe(worker.run(), lt.loop)
    try:
        now = time.time()
        jobs = []
        for i, max_tokens in enumerate((12, 12, 12, 1500)):
            job = _job(
                f"Say something nice about the number {i}.", max_tokens=max_tokens
            )
            job.enqueued_at, job.deadline = now, now + 300
            if max_tokens > 100:
                job.params["ignore_eos"] = True
            inference_client.job_enqueue(pool=pool, job=job)
            jobs.append(job)
        long_job = jobs[-1]
        wait_events(
            long_job.job_id,
            lambda ev: sum(e.type == "token" for e in ev) >= 5,
            timeout=STEP_TIMEOUT_S,
        )
        inference_client.job_cancel(job_id=long_job.job_id)
        results = {
            job.job_id: wait_events(job.job_id, terminal, timeout=STEP_TIMEOUT_S)
            for job in jobs
        }
    finally:
        lt.loop.call_soon_threadsafe(lambda: worker.stop(abort_running=True))
        running.result(60)

    for job in jobs:
        events = results[job.job_id]
        for event in events:
            protocol.event_validate(event.type, event.data)
        assert events[0].type == "meta" and events[0].data["model"] == engine.model
        done = events[-1]
        assert done.type == "done"
        tokens = [e.data["t"] for e in events if e.type == "token"]
        usage = done.data["usage"]
        assert usage["prompt_tokens"] == engine.count_tokens(job.messages)
        if job is long_job:
            assert done.data["finish_reason"] == "cancelled"
            assert 5 <= usage["completion_tokens"] < 1500
        else:
            assert done.data["finish_reason"] in {"stop", "length"}
            assert "".join(tokens).strip()
            assert 1 <= usage["completion_tokens"] <= 12
    assert engine.unfinished_requests() == 0


async def _noop() -> None:
    return None


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {"name": "get_time", "description": "The current time"},
}
WEATHER_QUESTION = "What is the weather in Paris right now?"


async def _collect_calls(
    engine: VllmEngine, job: Job
) -> tuple[str, list[ToolCallDelta], Finish]:
    text: list[str] = []
    pieces: list[ToolCallDelta] = []
    finish: Finish | None = None
    async for item in engine.generate(job):
        if isinstance(item, Delta):
            text.append(item.text)
        elif isinstance(item, ToolCallDelta):
            pieces.append(item)
        else:
            finish = item
    assert finish is not None, "generation ended without a Finish"
    return "".join(text), pieces, finish


def _calls(pieces: list[ToolCallDelta]) -> list[dict[str, str]]:
    """Assemble streamed pieces into calls, checking the ToolCallDelta contract."""
    calls: dict[int, dict[str, str]] = {}
    for piece in pieces:
        if piece.index not in calls:
            assert piece.id and piece.id.startswith("call_"), piece
            assert piece.name, piece
            calls[piece.index] = {"id": piece.id, "name": piece.name, "arguments": ""}
        else:
            assert piece.id is None and piece.name is None, piece
        calls[piece.index]["arguments"] += piece.arguments
    assert sorted(calls) == list(range(len(calls)))
    return [calls[i] for i in sorted(calls)]


def test_named_tool_choice_streams_one_call_whose_arguments_fit_the_schema(
    vllm_engine,
):
    engine, lt = vllm_engine
    job = _job(
        WEATHER_QUESTION,
        max_tokens=80,
        tools=[WEATHER, CLOCK],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    text, pieces, finish = lt.run(_collect_calls(engine, job), STEP_TIMEOUT_S)

    [call] = _calls(pieces)
    assert call["name"] == "get_weather"
    assert pieces[0].arguments == ""  # the first piece: id and name only
    args = json.loads(call["arguments"])
    assert set(args) == {"city", "unit"}
    assert isinstance(args["city"], str)
    assert args["unit"] in {"celsius", "fahrenheit"}
    assert finish.finish_reason == "tool_calls"
    assert not text.strip()


def test_required_tool_choice_calls_a_tool_without_parameters_with_empty_object(
    vllm_engine,
):
    engine, lt = vllm_engine
    job = _job(
        "What time is it?",
        max_tokens=60,
        tools=[CLOCK],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    _, pieces, finish = lt.run(_collect_calls(engine, job), STEP_TIMEOUT_S)

    [call] = _calls(pieces)
    assert call["name"] == "get_time"
    assert call["arguments"] == "{}"
    assert finish.finish_reason == "tool_calls"


def test_streamed_arguments_are_those_of_vllms_non_streamed_parse(vllm_engine):
    """The pieces joined equal what vLLM's non-streaming path (the whole output
    parsed at once by the same tool parser, as ``vllm serve`` answers a request
    without ``stream``) returns for the same prompt at temperature 0."""
    engine, lt = vllm_engine
    job = _job(
        WEATHER_QUESTION,
        max_tokens=80,
        seed=7,
        tools=[WEATHER, CLOCK],
        tool_choice="required",
    )
    _, pieces, finish = lt.run(_collect_calls(engine, job), STEP_TIMEOUT_S)
    streamed = _calls(pieces)

    async def non_streamed() -> list[tuple[str, str]]:
        from vllm import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        tokens, max_tokens = engine._fit(
            job.messages, job.max_tokens, tools_normalised(job.params["tools"])
        )
        session = engine.tool_session(job, tokens)
        sampling = engine._sampling(job, max_tokens, session)
        sampling.output_kind = RequestOutputKind.FINAL_ONLY
        final = None
        async for out in engine._engine.generate(
            TokensPrompt(prompt_token_ids=tokens), sampling, f"ns-{job.job_id}"
        ):
            final = out
        _, _, calls = session.parser.parse(
            final.outputs[0].text, session.request, enable_auto_tools=True
        )
        return [(c.name, c.arguments) for c in calls]

    whole = lt.run(non_streamed(), STEP_TIMEOUT_S)

    assert finish.finish_reason == "tool_calls"
    assert whole == [(c["name"], c["arguments"]) for c in streamed]
    assert len(pieces) > len(streamed) + 1  # the arguments came in several pieces


def test_tool_choice_none_answers_in_text(vllm_engine):
    engine, lt = vllm_engine
    job = _job("Say hello.", max_tokens=12, tools=[WEATHER, CLOCK], tool_choice="none")
    text, pieces, finish = lt.run(_collect_calls(engine, job), STEP_TIMEOUT_S)
    assert pieces == []
    assert text.strip()
    assert finish.finish_reason in {"stop", "length"}


def test_a_tool_result_round_trip_produces_an_answer(vllm_engine):
    engine, lt = vllm_engine
    ask = _job(
        WEATHER_QUESTION,
        max_tokens=80,
        tools=[WEATHER],
        tool_choice="required",
    )
    _, pieces, first = lt.run(_collect_calls(engine, ask), STEP_TIMEOUT_S)
    [call] = _calls(pieces)
    assert first.finish_reason == "tool_calls"

    answer = Job(
        job_id=f"t-{uuid.uuid4().hex[:8]}",
        messages=[
            *ask.messages,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": call["arguments"],
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": '{"temperature": 18, "sky": "sunny"}',
            },
        ],
        params={
            "temperature": 0.0,
            "max_tokens": 24,
            "tools": [WEATHER],
            "tool_choice": "none",
        },
    )
    text, pieces, finish = lt.run(_collect_calls(engine, answer), STEP_TIMEOUT_S)
    assert pieces == []
    assert text.strip()
    assert finish.finish_reason in {"stop", "length"}
    # the tools, the call and its result are all in the prompt
    plain = engine.count_tokens(answer.messages[:1])
    assert finish.usage.prompt_tokens > plain + 50


def test_a_tool_choice_that_names_no_offered_tool_is_refused(vllm_engine):
    engine, lt = vllm_engine
    job = _job(
        "Hi",
        max_tokens=5,
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "launch_rocket"}},
    )
    with pytest.raises(EngineError) as err:
        lt.run(_collect_calls(engine, job), STEP_TIMEOUT_S)
    assert err.value.code == ERROR_INVALID_PARAMETER


def test_a_continuation_writes_on_the_open_answer(vllm_engine):
    # continue_final_message: the chat template with the last (assistant) message
    # left open (transformers' continue_final_message), so the prompt ends with its
    # text and the model writes on from there
    engine, lt = vllm_engine
    partial = "The capital of France"
    job = _job("What is the capital of France?", max_tokens=8)
    job.messages.append({"role": "assistant", "content": partial})
    job.params["continue_final_message"] = True
    text, finish = lt.run(_collect(engine, job), STEP_TIMEOUT_S)
    prompt = engine._tokenizer.apply_chat_template(
        job.messages,
        tokenize=False,
        add_generation_prompt=False,
        continue_final_message=True,
    )
    assert prompt.endswith(partial)
    assert finish.usage.prompt_tokens == len(
        engine._tokenizer.encode(prompt, add_special_tokens=False)
    )
    assert not text.lstrip().startswith("The capital")  # it wrote on, not anew

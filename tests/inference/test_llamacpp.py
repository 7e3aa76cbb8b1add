"""The llama.cpp engine on the bundled SmolLM2-135M-Instruct GGUF (real model, CPU)."""

import asyncio
import json
import time

import pytest

from inference.engines.base import Delta, Finish
from inference.engines.llamacpp import LlamaCppEngine
from inference.engines.llamacpp_prompt import bundled_model_path, fewest_turns_dropped
from inference.protocol import Job
from tests.inference.helpers import enqueue, terminal, wait_events

pytestmark = pytest.mark.slow

QUESTION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.fixture(scope="module")
def engine():
    eng = LlamaCppEngine(n_ctx=1024)
    asyncio.run(eng.start())
    return eng


def collect(engine, job):
    async def run():
        return [item async for item in engine.generate(job)]

    return asyncio.run(run())


def test_bundled_model_is_found_through_package_metadata():
    path = bundled_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000


def test_generates_an_answer_with_exact_usage_from_the_chat_template(engine):
    items = collect(
        engine,
        Job(job_id="a", messages=QUESTION, params={"max_tokens": 48, "temperature": 0}),
    )
    text = "".join(i.text for i in items if isinstance(i, Delta))
    finish = items[-1]
    assert isinstance(finish, Finish)
    assert text.strip()
    # on topic: the chat template put the question before the answer. A 135M model at
    # temperature 0 answers "Paris" or, with other CPU kernels' rounding, in French
    # about France: the exact words depend on the llama.cpp build, not on our code.
    assert "Paris" in text or "France" in text
    assert finish.usage.prompt_tokens == engine.count_tokens(QUESTION)
    assert 0 < finish.usage.completion_tokens <= 48
    assert "<|im_end|>" not in text


def test_repeating_a_prompt_reuses_the_kv_cache_prefix(engine):
    # above temperature 0 (at 0 the prompt is evaluated whole: see below)
    params = {"max_tokens": 4, "temperature": 0.7}
    collect(engine, Job(job_id="b", messages=QUESTION, params=params))
    again = collect(engine, Job(job_id="c", messages=QUESTION, params=params))
    assert again[-1].usage.cached_tokens >= again[-1].usage.prompt_tokens - 1


@pytest.mark.parametrize("background_slot", [True, False])
def test_a_background_job_between_two_turns_keeps_the_turns_prefix_cached(
    background_slot,
):
    """A title or summary between two turns (Job.priority < 0) runs on its own
    context: the next turn reuses the previous one's KV prefix (with one shared
    context it prefills again from its first token)."""
    eng = LlamaCppEngine(n_ctx=1024, background_slot=background_slot)
    asyncio.run(eng.start())
    params = {"max_tokens": 4, "temperature": 0.7}
    try:
        collect(eng, Job(job_id="turn-1", messages=QUESTION, params=params))
        title = [{"role": "user", "content": "Write a title: cooking pasta at home."}]
        collect(eng, Job(job_id="title", messages=title, params=params, priority=-1))
        follow_up = [*QUESTION, {"role": "assistant", "content": "Paris."}]
        follow_up.append({"role": "user", "content": "And of Italy?"})
        items = collect(eng, Job(job_id="turn-2", messages=follow_up, params=params))
    finally:
        asyncio.run(eng.close())
    cached = items[-1].usage.cached_tokens
    first_prompt = eng.count_tokens(QUESTION)
    if background_slot:
        assert cached >= first_prompt - 2  # the whole first turn's prompt
    else:
        assert cached < first_prompt // 2  # evicted by the title's prompt


def test_abort_stops_within_one_decode_step(engine):
    job = Job(
        job_id="long",
        messages=[
            {"role": "user", "content": "Write a very long story about a dragon."}
        ],
        params={"max_tokens": 900, "temperature": 0.8},
    )

    async def run():
        seen = 0
        asked = None
        async for item in engine.generate(job):
            if isinstance(item, Delta):
                seen += 1
                if seen == 5:
                    asked = time.monotonic()
                    engine.abort("long")
            else:
                return item, time.monotonic() - asked

    finish, elapsed = asyncio.run(run())
    assert finish.finish_reason == "cancelled"
    assert finish.usage.completion_tokens < 20
    assert elapsed < 1.0


def test_a_history_longer_than_the_window_is_trimmed_not_overflowed():
    # a window of its own, 256 tokens: the kept history is prefilled on the CPU
    # (~960 tokens in the module's 1,024 took most of this test's time)
    engine = LlamaCppEngine(n_ctx=256, background_slot=False)
    asyncio.run(engine.start())
    history = [{"role": "system", "content": "Be brief."}]
    for i in range(300):
        history.append(
            {
                "role": "user",
                "content": f"Message {i}: tell me something about the number {i}.",
            }
        )
        history.append(
            {
                "role": "assistant",
                "content": f"The number {i} is a number that comes after {i - 1}.",
            }
        )
    history.append({"role": "user", "content": "Say hi."})
    assert engine.count_tokens(history) > engine.n_ctx
    items = collect(
        engine,
        Job(job_id="d", messages=history, params={"max_tokens": 64, "temperature": 0}),
    )
    finish = items[-1]
    assert isinstance(finish, Finish)
    assert finish.usage.prompt_tokens + 64 <= engine.n_ctx
    assert finish.usage.completion_tokens > 0


def _dropped_one_turn_at_a_time(messages, kept, render, fits):
    """The trimming as it was: drop the oldest turn and render again, until it fits."""
    msgs = list(messages)
    tokens = render(msgs)
    while not fits(tokens) and len(msgs) > kept:
        drop = 1 if msgs[0]["role"] == "system" else 0
        del msgs[drop]
        while len(msgs) > drop + kept - 1 and msgs[drop]["role"] != "user":
            del msgs[drop]
        tokens = render(msgs)
    return tokens


@pytest.mark.parametrize("system", [True, False])
@pytest.mark.parametrize("kept", [2, 3])
def test_trimming_by_halves_drops_the_same_turns_as_one_at_a_time(system, kept):
    # a turn: a user message, an assistant call, a tool result, the answer (their
    # lengths vary); a "token" per character, tagged with its message
    history = [{"role": "system", "content": "Be brief."}] if system else []
    for i in range(40):
        history.append({"role": "user", "content": "q" * (1 + i % 7)})
        if i % 3 == 0:
            history.append({"role": "assistant", "content": "c" * (i % 5)})
            history.append({"role": "tool", "content": "t" * (2 + i % 4)})
        history.append({"role": "assistant", "content": "a" * (3 + i % 11)})
    history.append({"role": "user", "content": "last question"})
    renders = []

    def render(msgs):
        renders.append(len(msgs))
        return [f"{n}:{c}" for n, m in enumerate(msgs) for c in m["content"] + "|"]

    full = len(render(history))
    for room in [full, full - 1, full // 2, 40, 25, 1]:
        renders.clear()
        by_halves = fewest_turns_dropped(
            history, kept, render, lambda ids, room=room: len(ids) <= room
        )
        assert len(renders) <= 2 + (len(history) // 2).bit_length()
        one_at_a_time = _dropped_one_turn_at_a_time(
            history, kept, render, lambda ids, room=room: len(ids) <= room
        )
        assert by_halves == one_at_a_time


def _stream_pos(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


def test_two_slots_serve_two_concurrent_jobs_that_progress_together(start_worker):
    handle = start_worker(
        LlamaCppEngine(n_ctx=512, slots=2, n_threads=1, seed=7), concurrency=2
    )
    assert handle.worker.concurrency == 2
    story = [{"role": "user", "content": "Write a long story about a brave dragon."}]
    for job_id in ("left", "right"):
        enqueue(job_id, messages=story, max_tokens=40)
    left = wait_events("left", terminal, timeout=120)
    right = wait_events("right", terminal, timeout=120)
    for events in (left, right):
        assert events[-1].type == "done", events[-1]
        assert events[-1].data["usage"]["completion_tokens"] > 5

    def first_token(events):
        return _stream_pos(next(e.id for e in events if e.type == "token"))

    # Each job streamed its first token before the other one ended: both ran at once.
    assert first_token(left) < _stream_pos(right[-1].id)
    assert first_token(right) < _stream_pos(left[-1].id)


def _text(items):
    return "".join(i.text for i in items if isinstance(i, Delta))


STORY = [{"role": "user", "content": "Describe the sea in three sentences."}]


def test_stop_cuts_the_answer_before_the_stop_string(engine):
    params = {"max_tokens": 40, "temperature": 0}
    whole = _text(collect(engine, Job(job_id="s0", messages=STORY, params=params)))
    assert "e" in whole
    items = collect(
        engine, Job(job_id="s1", messages=STORY, params={**params, "stop": ["e"]})
    )
    assert _text(items) == whole[: whole.index("e")]
    assert items[-1].finish_reason == "stop"


def test_temperature_0_gives_the_same_text_whatever_ran_before(engine):
    """llama.cpp's prefix reuse evaluates a prompt's suffix in other batch shapes than
    a fresh prompt, which can change a greedy answer: at temperature 0 the prompt is
    evaluated whole, so the text depends on the prompt alone."""
    params = {"max_tokens": 40, "temperature": 0}
    first = collect(engine, Job(job_id="t0", messages=STORY, params=params))
    other = [*QUESTION[:1], {"role": "user", "content": "Describe a mountain lake."}]
    collect(engine, Job(job_id="t1", messages=other, params=params))
    again = collect(engine, Job(job_id="t2", messages=STORY, params=params))
    assert _text(again) == _text(first)
    assert again[-1].usage.completion_tokens == first[-1].usage.completion_tokens
    assert again[-1].usage.cached_tokens == 0  # nothing reused from the slot


def test_a_seed_makes_sampling_repeatable(engine):
    params = {"max_tokens": 24, "temperature": 1.0, "seed": 1234}
    texts = {
        _text(collect(engine, Job(job_id=f"seed-{i}", messages=STORY, params=params)))
        for i in range(2)
    }
    assert len(texts) == 1


def test_logit_bias_forces_a_token(engine):
    token = engine._counter.tokenize(b" banana", add_bos=False)[0]
    items = collect(
        engine,
        Job(
            job_id="bias",
            messages=QUESTION,
            params={"max_tokens": 1, "temperature": 0, "logit_bias": {str(token): 100}},
        ),
    )
    assert _text(items) == " banana"


def test_response_format_json_schema_holds_the_answer_to_the_schema(engine):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
    }
    items = collect(
        engine,
        Job(
            job_id="json",
            messages=QUESTION,
            params={
                "max_tokens": 60,
                "temperature": 0,
                "response_format": {"type": "json_schema", "schema": schema},
            },
        ),
    )
    answer = json.loads(_text(items))
    assert isinstance(answer["city"], str)
    assert items[-1].finish_reason == "stop"


def test_penalties_change_a_greedy_answer(engine):
    params = {"max_tokens": 40, "temperature": 0}
    plain = _text(collect(engine, Job(job_id="p0", messages=STORY, params=params)))
    again = _text(collect(engine, Job(job_id="p2", messages=STORY, params=params)))
    assert again == plain  # greedy text is repeatable: a change is the penalties'
    penalised = _text(
        collect(
            engine,
            Job(
                job_id="p1",
                messages=STORY,
                params={**params, "presence_penalty": 2.0, "frequency_penalty": 2.0},
            ),
        )
    )
    assert penalised != plain


def test_a_continuation_prompt_ends_inside_the_open_answer(engine):
    # "Continue": the chat template rendered with the last (assistant) message left
    # open, so the model writes on from its last character (no end of turn, no new
    # assistant header); the same tokens as the full render up to that point
    from inference.engines.llamacpp_prompt import chat_prompt_load

    prompt = chat_prompt_load()
    partial = [*QUESTION, {"role": "assistant", "content": "The capital of France"}]
    opened = prompt.render(partial, continue_final=True)
    closed = prompt.render(partial)
    assert opened.endswith("<|im_start|>assistant\nThe capital of France")
    assert closed.startswith(opened) and len(closed) > len(opened)
    items = collect(
        engine,
        Job(
            job_id="continued",
            messages=partial,
            params={
                "max_tokens": 8,
                "temperature": 0,
                "continue_final_message": True,
            },
        ),
    )
    finish = items[-1]
    assert isinstance(finish, Finish)
    assert finish.usage.prompt_tokens == len(
        prompt.tokens(partial, continue_final=True)
    )
    text = "".join(i.text for i in items if isinstance(i, Delta))
    assert not text.lstrip().startswith("The capital")  # it wrote on, not anew


def test_a_prompt_cache_resumes_conversations_served_in_turn():
    # one slot, two conversations in turn (A, B, A): without the cache the slot holds
    # B's prompt when A's next turn comes; with it, A's history is loaded back
    cached = LlamaCppEngine(n_ctx=1024, prompt_cache_mb=64, background_slot=False)
    asyncio.run(cached.start())

    def turn(conv: str, n: int) -> Job:
        messages = [{"role": "system", "content": "Be brief."}]
        for i in range(n):
            messages.append(
                {"role": "user", "content": f"{conv} question {i}: " + "soil " * 40}
            )
            if i < n - 1:
                messages.append({"role": "assistant", "content": f"answer {i}"})
        return Job(
            job_id=f"{conv}{n}",
            messages=messages,
            params={"max_tokens": 2, "temperature": 0.7},
        )

    first = collect(cached, turn("A", 1))[-1].usage
    collect(cached, turn("B", 1))
    again = collect(cached, turn("A", 2))[-1].usage
    assert again.cached_tokens >= first.prompt_tokens - 1
    assert cached._states is not None and cached._states.loads == 1
    asyncio.run(cached.close())

"""Engines: UTF-8 reassembly and the scripted engine (inference/engines/)."""

import asyncio

import pytest

from inference.engines import engine_create
from inference.engines.base import Delta, EngineError, Finish, StopText, Utf8Decoder
from inference.engines.openai import OpenAIEngine
from inference.engines.scripted import ScriptedEngine
from inference.protocol import Job

TEXT = "你好世界 🌍 ok"


@pytest.mark.parametrize("split", range(1, len(TEXT.encode())))
def test_utf8_decoder_never_emits_a_partial_character(split):
    raw = TEXT.encode()
    decoder = Utf8Decoder()
    pieces = [decoder.feed(raw[:split]), decoder.feed(raw[split:]), decoder.flush()]
    assert "".join(pieces) == TEXT
    assert all("\ufffd" not in p for p in pieces)


def test_utf8_decoder_replaces_invalid_bytes_instead_of_raising():
    decoder = Utf8Decoder()
    assert decoder.feed(b"a\xffb") == "a\ufffdb"
    assert decoder.feed(b"\xf0\x9f") == ""
    # a character the stream ended in the middle of (a cut at the token limit) is
    # dropped, not shown as U+FFFD
    assert decoder.flush() == ""
    assert decoder.feed("杀".encode()) == "杀"


def run(engine, job):
    async def collect():
        return [item async for item in engine.generate(job)]

    return asyncio.run(collect())


def test_scripted_engine_emits_whole_characters_when_bytes_are_split():
    engine = ScriptedEngine(text="你好世界 🌍", chunk_bytes=15)
    items = run(engine, Job(job_id="j", messages=[]))
    deltas = [i.text for i in items if isinstance(i, Delta)]
    assert deltas == ["你好世界 ", "🌍"]
    assert isinstance(items[-1], Finish)
    assert items[-1].usage.completion_tokens == 2
    assert items[-1].finish_reason == "stop"


def test_scripted_engine_stops_at_max_tokens_with_finish_reason_length():
    engine = ScriptedEngine(text="a b c", cycle=True)
    items = run(engine, Job(job_id="j", messages=[], params={"max_tokens": 7}))
    assert items[-1].finish_reason == "length"
    assert items[-1].usage.completion_tokens == 7


def test_scripted_engine_abort_before_start_finishes_cancelled():
    engine = ScriptedEngine(text="a b c")
    engine.abort("j")
    items = run(engine, Job(job_id="j", messages=[]))
    assert [type(i) for i in items] == [Finish]
    assert items[0].finish_reason == "cancelled"


def test_scripted_engine_failure_injection_raises_engine_error():
    engine = ScriptedEngine(text="a b c d", fail_after=2)
    with pytest.raises(EngineError):
        run(engine, Job(job_id="j", messages=[]))


def test_scripted_engine_holds_the_rest_of_the_answer_after_the_first_token():
    """``rest_delay_ms``: the first token at once; the rest and the finish after the
    pause, which an abort ends with the answer cancelled."""
    engine = ScriptedEngine(text="one two three", rest_delay_ms=50)

    async def first_then_abort():
        gen = engine.generate(Job(job_id="j", messages=[]))
        first = await gen.__anext__()
        engine.abort("j")  # during the pause
        return first, [item async for item in gen]

    first, rest = asyncio.run(first_then_abort())
    assert first == Delta("one")
    assert [type(i) for i in rest] == [Finish]
    assert rest[0].finish_reason == "cancelled"


def test_scripted_engine_pauses_once_after_the_first_token(monkeypatch):
    """The pause comes after the first token and before the rest and the finish
    (the engine's sleeps recorded in order with what it yields)."""
    log: list = []

    async def sleep(seconds):
        log.append(("sleep", seconds))

    monkeypatch.setattr("inference.engines.scripted.asyncio.sleep", sleep)
    engine = ScriptedEngine(text="one two three", rest_delay_ms=50)

    async def collect():
        async for item in engine.generate(Job(job_id="k", messages=[])):
            log.append(item.text if isinstance(item, Delta) else item.finish_reason)

    asyncio.run(collect())
    assert log == ["one", ("sleep", 0.05), " two", " three", "stop"]


def test_engine_create_rejects_unknown_engines():
    with pytest.raises(ValueError, match="unknown engine"):
        engine_create("tpu-magic")


SEA = "The sea is a vast body of water."


@pytest.mark.parametrize("size", range(1, 8))
def test_stop_text_cuts_before_a_stop_string_split_across_pieces(size):
    stopper = StopText(["vast", "zzz"])
    pieces = [SEA[i : i + size] for i in range(0, len(SEA), size)]
    released = "".join(stopper.feed(p) for p in pieces) + stopper.flush()
    assert released == "The sea is a "
    assert stopper.hit


def test_stop_text_releases_everything_when_no_stop_string_appears():
    stopper = StopText(["vat"])
    released = stopper.feed("The sea is a va") + stopper.feed("st body.")
    assert released + stopper.flush() == "The sea is a vast body."
    assert not stopper.hit


def test_scripted_engine_stops_at_a_stop_string_inside_a_chunk():
    items = run(
        ScriptedEngine(text=SEA, chunk_bytes=3),
        Job(job_id="s", messages=[], params={"stop": ["e"]}),
    )
    assert "".join(i.text for i in items if isinstance(i, Delta)) == "Th"
    assert items[-1].finish_reason == "stop"


def test_the_openai_engine_sends_every_parameter_of_the_table():
    schema = {"type": "object"}
    params = {
        "max_tokens": 9,
        "temperature": 0.0,
        "top_p": 0.5,
        "stop": ["x"],
        "seed": 3,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "logit_bias": {"17": 5.0},
        "response_format": {"type": "json_schema", "schema": schema},
    }
    body = OpenAIEngine(base_url="http://h:1", model="m")._body(
        Job(job_id="o", messages=[{"role": "user", "content": "hi"}], params=params)
    )
    assert {k: body[k] for k in params if k != "response_format"} == {
        k: v for k, v in params.items() if k != "response_format"
    }
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema},
    }

"""Engines: UTF-8 reassembly and the scripted engine (inference/engines/)."""

import asyncio

import pytest

from inference.engines import engine_create
from inference.engines.base import Delta, EngineError, Finish, Utf8Decoder
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
    assert decoder.flush() == "\ufffd"


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


def test_engine_create_rejects_unknown_engines():
    with pytest.raises(ValueError, match="unknown engine"):
        engine_create("tpu-magic")

"""The Redis protocol: the job format and event schemas (inference/protocol.py)."""

import json

import pytest

from inference import protocol
from inference.vectors import vectors_decode, vectors_encode


def test_every_event_type_has_a_schema_that_accepts_a_valid_payload():
    valid = {
        "meta": {"model": "m", "worker": "w", "queue_ms": 3},
        "token": {"t": "hé"},
        "tool_call": {"index": 0, "id": "call_1", "name": "f", "arguments_delta": ""},
        "done": {
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "cached_tokens": 0},
            "ttft_ms": 12,
            "latency_ms": 40,
        },
        "error": {"code": "engine_error", "message": "failed", "usage": None},
        "embedding": {
            "model": "all-MiniLM-L6-v2",
            "worker": "w",
            "dim": 2,
            "count": 1,
            "vectors": vectors_encode([[0.6, 0.8]]),
            "usage": {"prompt_tokens": 4, "completion_tokens": 0, "cached_tokens": 0},
            "queue_ms": 1,
            "latency_ms": 9,
        },
    }
    assert set(valid) == set(protocol.EVENT_SCHEMAS)
    for event_type, payload in valid.items():
        protocol.event_validate(event_type, payload)
    # a cached answer's meta marks its cache (optional field)
    for kind in ("exact", "semantic"):
        protocol.event_validate("meta", {**valid["meta"], "cache": kind})


@pytest.mark.parametrize(
    "event_type,payload,problem",
    [
        ("token", {}, "missing field 't'"),
        ("token", {"t": 3}, "bad value"),
        ("token", {"t": "a", "x": 1}, "unexpected fields"),
        (
            "done",
            {
                "finish_reason": "exploded",
                "usage": {
                    "prompt_tokens": 1,
                    "completion_tokens": 1,
                    "cached_tokens": 0,
                },
                "ttft_ms": None,
                "latency_ms": 1,
            },
            "finish_reason",
        ),
        (
            "done",
            {
                "finish_reason": "stop",
                "usage": {"prompt_tokens": 1},
                "ttft_ms": None,
                "latency_ms": 1,
            },
            "usage",
        ),
        ("meta", {"model": "m", "worker": "w", "queue_ms": True}, "queue_ms"),
        (
            "meta",
            {"model": "m", "worker": "cache", "queue_ms": 0, "cache": "fuzzy"},
            "cache",
        ),
        ("meta", {"model": "m", "queue_ms": 0, "cache": "exact"}, "missing field"),
        ("nope", {}, "unknown event type"),
    ],
)
def test_event_validate_rejects_malformed_payloads(event_type, payload, problem):
    with pytest.raises(ValueError, match=problem):
        protocol.event_validate(event_type, payload)


def test_job_round_trips_through_queue_fields():
    job = protocol.Job(
        job_id="j1",
        messages=[{"role": "user", "content": "你好 🌍"}],
        params={"max_tokens": 7},
        enqueued_at=1.5,
        deadline=61.5,
    )
    again = protocol.Job.from_fields(job.to_fields())
    assert again == job
    assert again.max_tokens == 7


def test_a_jobs_entry_is_the_json_of_all_its_fields_in_order_job_id_first():
    from dataclasses import asdict

    calls = [{"id": "c1", "type": "function", "function": {"name": "f"}}]
    job = protocol.Job(
        job_id="j2",
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": calls},
        ],
        params={"max_tokens": 7, "stop": ["\n"]},
        affinity="abc",
    )
    raw = job.to_fields()["job"]
    assert json.loads(raw) == asdict(job)
    assert list(json.loads(raw)) == list(asdict(job))  # the order too
    assert raw.startswith(protocol.job_entry_prefix("j2"))
    job.affinity = ""
    assert "affinity" not in json.loads(job.to_fields()["job"])


def test_job_from_fields_rejects_entries_that_are_not_jobs():
    with pytest.raises(ValueError):
        protocol.Job.from_fields({"other": "x"})
    with pytest.raises(ValueError):
        protocol.Job.from_fields({"job": '{"job_id": "", "messages": []}'})


def test_event_parse_decodes_bytes_and_text_entries():
    fields = protocol.token_fields("ok")
    event = protocol.event_parse(
        b"1-0", {k.encode(): v.encode() for k, v in fields.items()}
    )
    assert (event.id, event.type, event.data, event.is_terminal) == (
        "1-0",
        "token",
        {"t": "ok"},
        False,
    )


@pytest.mark.parametrize(
    "text",
    [
        "ok",
        "",
        " hé 中文 🙂",
        'say "hi"',
        "a\\b",
        "line\nbreak\ttab\x00",
        "\u2028",
        '"}',
    ],
)
def test_a_token_entry_read_flat_is_the_text_that_was_written(text):
    """The hub's reading of a token entry (no JSON decoder when nothing is escaped)
    gives back exactly the text of :func:`token_fields`, escapes and all."""
    fields = protocol.token_fields(text)
    flat = ["e", fields["e"], "d", fields["d"]]
    event = protocol.event_parse_flat("5-1", flat)
    assert (event.id, event.type, event.data) == ("5-1", "token", {"t": text})


def test_a_token_entry_with_more_fields_in_its_data_keeps_them():
    data = json.dumps({"t": "a", "x": "b"})
    event = protocol.event_parse_flat("5-2", ["e", "token", "d", data])
    assert event.data == {"t": "a", "x": "b"}


def test_vectors_survive_encoding_as_float32_and_a_wrong_size_is_refused():
    import numpy as np

    rows = [[0.6, 0.8, 0.0], [1.0, 0.0, -0.5]]
    encoded = vectors_encode(rows)
    assert encoded == vectors_encode(np.array(rows, dtype=np.float32))
    decoded = vectors_decode(encoded, count=2, dim=3)
    assert decoded == [pytest.approx(r) for r in rows]
    with pytest.raises(ValueError, match="expected 3x3"):
        vectors_decode(encoded, count=3, dim=3)


def test_an_embed_job_round_trips_and_a_bad_input_is_refused():
    job = protocol.Job(
        job_id="j", messages=[], kind=protocol.KIND_EMBED, input=["a", "b"]
    )
    assert protocol.Job.from_fields(job.to_fields()) == job
    bad = protocol.Job(job_id="j", messages=[], kind="paint").to_fields()
    with pytest.raises(ValueError, match="kind"):
        protocol.Job.from_fields(bad)
    with pytest.raises(ValueError, match="list of strings"):
        protocol.Job.from_fields(
            protocol.Job(job_id="j", messages=[], input=[1]).to_fields()  # type: ignore[list-item]  # a bad input on purpose
        )


def test_a_tool_call_event_carries_a_piece_of_one_call():
    first = protocol.tool_call_fields(
        index=0, id="call_1", name="get_weather", arguments_delta=""
    )
    later = protocol.tool_call_fields(index=0, arguments_delta='{"city": "日')
    for fields in (first, later):
        protocol.event_validate(fields["e"], json.loads(fields["d"]))
    assert json.loads(later["d"]) == {"index": 0, "arguments_delta": '{"city": "日'}
    for bad in ({"index": "0", "arguments_delta": ""}, {"index": 0, "id": ""}):
        with pytest.raises(ValueError):
            protocol.event_validate("tool_call", {"arguments_delta": "", **bad})

"""bench/sse_wire.py's light stream reader and bench/sse_report.py's derived
per-core row, on bytes and figures made here. No benchmark runs here."""

from __future__ import annotations

import argparse

from bench.sse_report import per_core_derived
from bench.sse_wire import dechunk, frame_head


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def test_dechunk_takes_whole_chunks_and_leaves_a_partial_one_for_the_next_read():
    parts = [b"retry: 1000\n\n", b"id: 1-0\nevent: token\n", b'data: {"t": "x"}\n\n']
    body = b"".join(_chunk(p) for p in parts) + b"0\r\n\r\n"
    cut = body.index(b"data") + 3  # inside the third chunk
    buffer = bytearray(body[:cut])
    data, ended = dechunk(buffer)
    assert (data, ended) == (parts[0] + parts[1], False)
    buffer += body[cut:]
    data, ended = dechunk(buffer)
    assert (data, ended) == (parts[2], True)
    assert not buffer


def test_frame_head_reads_event_id_and_data_and_none_for_comments():
    assert frame_head(b'id: 7-0\nevent: token\ndata: {"t": "a"}') == (
        b"token",
        b"7-0",
        b'{"t": "a"}',
    )
    assert frame_head(b": ping")[0] is None
    assert frame_head(b"retry: 1000")[0] is None


def _step(n: int, *, web_cores: float, load: float, completed=None, gap=120.0):
    return {
        "n": n, "completed": n if completed is None else completed,
        "load_cores_ours": load, "load_core_busy": 1.0, "web_cores": web_cores,
        "frames_per_s": n * 20.0, "cpu_us_per_frame": web_cores * 1e6 / (n * 20.0),
        "gap_p99": gap,
    }  # fmt: skip


def test_the_derived_row_uses_the_largest_step_neither_side_limited():
    args = argparse.Namespace(server="daphne", tokens=100, delay_ms=20.0)
    steps = [
        _step(200, web_cores=0.4, load=0.6),
        _step(400, web_cores=0.8, load=0.85),
        _step(800, web_cores=0.9, load=0.95),  # the load side limited it
        _step(1600, web_cores=0.5, load=0.5, completed=1000),  # failed streams
        _step(3200, web_cores=0.3, load=0.5, gap=900.0),  # a starved web process
    ]
    row = per_core_derived(steps, args)
    assert row["value"] == 500  # 400 streams / 0.8 core
    assert "derived from N=400" in row["params"]
    none = per_core_derived(steps[2:], args)
    assert str(none["value"]).startswith("not derived")
    assert "N=3200: 900 ms" in none["params"]

"""bench/gateway_overhead.py starts our web process as deployed (uvicorn with the
Procfile's options, the same command line as tests/stack.py's), or daphne on request;
picks the client per level and says when a level measured its load core."""

import os
import threading
import time
from pathlib import Path

import pytest

from bench.load_side import LoadUse, load_bound, load_said, run_wait_s
from bench.overhead_levels import client_for, ours_argv, overhead_parser
from tests.stack import WEB_OPTIONS, web_argv

ROOT = Path(__file__).resolve().parents[2]


def test_ours_is_the_deployed_uvicorn_by_default():
    args = overhead_parser().parse_args([])
    argv = ours_argv(args.server, 8123)
    assert Path(argv[0]).name == "uvicorn"
    assert argv == web_argv(8123)
    # the options the Procfile's web line gives, in full
    procfile = (ROOT / "Procfile").read_text()
    assert " ".join(WEB_OPTIONS) in procfile
    assert " ".join(WEB_OPTIONS) in " ".join(argv)
    assert argv[-1] == "chatsite.asgi:application"


def test_ours_can_be_daphne_for_a_comparison():
    args = overhead_parser().parse_args(["--server", "daphne"])
    argv = ours_argv(args.server, 8123)
    assert Path(argv[0]).name == "daphne"
    assert "port=8123" in " ".join(argv)


def test_an_unknown_server_is_refused():
    with pytest.raises(ValueError, match="uvicorn or daphne"):
        ours_argv("gunicorn", 8123)
    with pytest.raises(SystemExit):
        overhead_parser().parse_args(["--server", "gunicorn"])


def test_the_official_client_at_c1_and_the_light_one_above_unless_asked():
    assert client_for("auto", 1) == "openai"
    assert client_for("auto", 50) == "raw"
    assert client_for("openai", 50) == "openai"
    assert client_for("raw", 1) == "raw"


def test_a_level_is_load_bound_when_any_target_saturated_the_load_core():
    def use(load_busy_s: float) -> LoadUse:
        return LoadUse(
            (0, 1), {}, wall_s=10.0, busy_s={"web": 1.0, "load": load_busy_s}
        )

    assert load_bound({"direct": use(5.0), "ours": use(8.9)}) == ""
    said = load_bound({"direct": use(9.5), "ours": use(8.0), "litellm": use(9.9)})
    assert said == "load-bound: load core 95% (direct), 99% (litellm) busy"
    # unpinned: no core share, so no claim either way
    assert load_bound({"ours": LoadUse(None, {}, wall_s=10.0)}) == ""


def test_a_saturated_load_core_is_no_bound_while_the_harness_got_the_cpu():
    def use(waits: dict[str, float]) -> LoadUse:
        return LoadUse(
            (0, 1),
            {},
            wall_s=10.0,
            busy_s={"web": 3.0, "load": 9.6},
            wait_s=waits,
        )

    # the product's own worker filled the core; the client and upstream waited 2-3 %
    assert load_bound({"ours": use({"client": 0.2, "upstream": 0.3})}) == ""
    # the client waited a tenth of the time or more: its figures are the harness's
    said = load_bound({"ours": use({"client": 1.4, "upstream": 0.3})})
    assert said == "load-bound: load core 96% (ours, client waited 14%) busy"
    # no wait read (a kernel without schedstat): the busy share alone decides
    assert load_bound({"ours": use({})}) == "load-bound: load core 96% (ours) busy"


def test_the_run_queue_wait_is_read_from_the_kernel_and_grows():
    before = run_wait_s(os.getpid())
    assert before is not None and before >= 0
    stop = time.monotonic() + 0.3

    def spin() -> None:
        while time.monotonic() < stop:
            pass

    # more runnable threads than one core: one of them waits on the run queue
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        threads = [threading.Thread(target=spin) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.sched_setaffinity(0, allowed)
    after = run_wait_s(os.getpid())
    assert after is not None and after > before
    assert run_wait_s(2**22 + 12345) is None  # no such process


def test_the_load_is_said_per_target_with_the_load_processes_own_use():
    said = load_said({"direct": 1.0, "ours": 0.62}, {"direct": 0.34, "ours": 0.37})
    assert (
        said
        == "load core busy: direct 100% (load processes 0.34 core), ours 62% (0.37 core)"
    )
    assert load_said({"ours": None}, {"ours": 0.3}) == ""
    waited = load_said(
        {"direct": 0.2, "ours": 0.96},
        {"direct": 0.1, "ours": 0.88},
        {"direct": {}, "ours": {"client": 0.02, "upstream": 0.03}},
    )
    assert waited == (
        "load core busy: direct 20% (load processes 0.10 core), "
        "ours 96% (0.88 core; client waited 2%, upstream waited 3%)"
    )

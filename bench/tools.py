"""The tools' figures (issue 26): the run_python sandbox's start, and what the chat's
tool loop adds to a turn outside the model.

    .venv/bin/python bench/tools.py [--runs 30] [--turns 20]

1. Sandbox start: runs ``pass`` in the sandbox (tools.sandbox.python_run, the
   settings' limits) ``--runs`` times after one warm-up run and prints p50/p95/min/max
   of the wall time from the launch to the end of the run, in ms; beside it the same
   interpreter started bare (``/usr/bin/python3 -I -c pass``, no sandbox), so the
   sandbox's own share shows. Goal: p50 <= 150 ms. No services.
2. The tool loop, live: the web process (uvicorn), a Celery worker (``--pool solo``, as in the Procfile:
   it runs ``conversations.tasks.tool_step``) and the scripted engine with no delay
   calling ``run_python`` (``print(6 * 7)``) on the dev services (``make migrate``
   first); a ``--turns``-turn conversation, each turn call → sandbox → answer
   (CHAT_TOOL_MAX_STEPS=1), read over HTTP as the chat page does (POST, then the
   stream to the final ``done``), after one warm-up turn. Per turn, from the client's
   clock:

   - call → result: the calling answer's ``done`` frame (written when the call's last
     token is) to the first ``tool_step`` frame carrying the result: settling, the
     Celery hop, the sandbox run, screening, storing, the relay's poll;
   - call → next token: to the first token of the answer that reads the result (the
     continuation's prompt and admission as well);
   - overhead outside the model: the turn's wall time (POST sent → final ``done``)
     with the instant engine, per turn (p50/p95) and summed over the conversation. It
     includes the sandbox's run of ``print(6 * 7)`` (about the start time of part 1).
     Beside it, the worker's share: its two generations' stored ``latency_ms``
     (enqueue → done at the worker, of which the engine's own time is ~0 here).

Needs bubblewrap (make sandbox). Input/output moderation and background jobs are off:
what is measured is the loop's own path.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import django_start  # noqa: E402
from bench.record import figures_record, pct  # noqa: E402

GOAL_P50_MS = 150.0

POOL = "tool-bench"  # a pool only this run's worker serves
PASSWORD = "tool-bench-pass-123"
CODE = "print(6 * 7)"
CALLS = json.dumps(
    [{"name": "run_python", "arguments": json.dumps({"code": CODE}), "id": "call_b"}]
)
# the scripted engine with no delay: the model's own time is about 0
CHAT_WORKER = ["--pool", POOL, "--engine", "scripted", "--delay-ms", "0"]
CHAT_WORKER += ["--script-text", "It is 42.", "--no-cycle"]
CHAT_WORKER += ["--script-tool-calls", CALLS]


@dataclass
class ToolTurn:
    """The client's monotonic times (s) of one tool turn's frames: the POST sent, the
    calling answer's ``done`` (its calls' last token written), the first ``tool_step``
    frame carrying the result (state done/error), the ``next`` frame, the next
    answer's first ``token`` and its ``done``; and the two answers' time at the worker
    (their stored ``latency_ms``, enqueue → done, ms)."""

    sent: float
    call_done: float
    result: float
    next: float
    next_token: float
    end: float
    engine_ms: float = 0.0

    @property
    def result_ms(self) -> float:
        return (self.result - self.call_done) * 1000

    @property
    def next_token_ms(self) -> float:
        return (self.next_token - self.call_done) * 1000

    @property
    def wall_ms(self) -> float:
        return (self.end - self.sent) * 1000


def tool_turn(http: Any, content: str, url: str) -> tuple[ToolTurn, dict[str, Any]]:
    """POST ``content`` to ``url`` as the chat page does, read the answer's stream
    through its tool step to the final answer's ``done``; return the times and the
    POST's JSON. Raises RuntimeError when the turn does not go call → result → answer."""
    from bench.chat import _sse_events

    headers = {"X-CSRFToken": http.cookies["csrftoken"]}
    sent = time.monotonic()
    response = http.post(url, data={"content": content}, headers=headers)
    if response.status_code != 201:
        raise RuntimeError(f"POST {url}: {response.status_code} {response.text[:300]}")
    body = response.json()
    seen: dict[str, float] = {}
    with http.stream("GET", body["assistant_message"]["stream_url"]) as stream:
        for event in _sse_events(stream):
            now = time.monotonic()
            data = event.data if isinstance(event.data, dict) else {}
            if event.event == "done" and "call_done" not in seen:
                if data.get("finish_reason") != "tool_calls":
                    raise RuntimeError(f"no tool call: {data.get('finish_reason')}")
                seen["call_done"] = now
            elif event.event == "tool_step" and data.get("state") in ("done", "error"):
                seen.setdefault("result", now)
            elif event.event == "next":
                seen.setdefault("next", now)
            elif event.event == "token" and "next" in seen:
                seen.setdefault("next_token", now)
            elif event.event == "done":
                seen["end"] = now
                break
            elif event.event in ("error", "step_end"):
                raise RuntimeError(f"the turn ended with {event.event}: {data}")
    missing = {"call_done", "result", "next", "next_token", "end"} - set(seen)
    if missing:
        raise RuntimeError(f"the stream had no {sorted(missing)} frame")
    return ToolTurn(sent=sent, **seen), body


def engine_ms(conversation_id: str, skip: set[Any]) -> tuple[float, set[Any]]:
    """The summed ``latency_ms`` (the worker's time, enqueue to done) of the
    conversation's answers not in ``skip``, and their ids."""
    from conversations.models import Message

    rows = Message.objects.filter(
        conversation_id=conversation_id, role="assistant"
    ).exclude(id__in=skip)
    rows = list(rows.values_list("id", "latency_ms"))
    return float(sum(ms or 0 for _, ms in rows)), {i for i, _ in rows}


def loop_bench(turns: int) -> list[ToolTurn]:
    """Run a ``turns``-turn tool conversation on a live stack (uvicorn, the scripted
    worker, a Celery worker for the tool steps) and return each turn's times."""
    import httpx

    from bench.chat import NEW_CONVERSATION, login
    from bench.users import plan_user, pool_upsert
    from gateway.models import ModelPool
    from tests.stack import (
        process_start,
        processes_stop,
        stack_env,
        web_process,
        worker_processes,
    )

    pool = pool_upsert(POOL, model="scripted-1", engine=ModelPool.Engine.SCRIPTED)
    plan_user("tool-bench", plan="tool-bench", pools=[pool], password=PASSWORD)
    env = stack_env(
        {
            "SAFETY_INPUT_ENABLED": "0",
            "SAFETY_OUTPUT_ENABLED": "0",
            "CHAT_MESSAGE_RATE": "100000/m",
            "LOGIN_RATE": "100000/m",
            "CHAT_BACKGROUND_JOBS": "0",  # titles, summaries, facts: not measured
            "CHAT_TOOL_MAX_STEPS": "1",  # one round a turn, then the answer
            "INFERENCE_DEFAULT_POOL": POOL,
            "LOG_LEVEL": "WARNING",
        },
        for_tests=False,
    )
    celery = Path(sys.executable).parent / "celery"
    argv = [celery, "-A", "chatsite", "worker", "--loglevel", "WARNING"]
    queue = process_start([*argv, "--pool", "solo"], env, "celery")
    rows: list[ToolTurn] = []
    try:
        with worker_processes([CHAT_WORKER], env), web_process(env) as web:
            with httpx.Client(base_url=web.base, timeout=120) as http:
                login(http, username="tool-bench", password=PASSWORD)
                url, done = NEW_CONVERSATION, set()
                tool_turn(http, "Warm up: what is 6 * 7?", url)  # not counted
                for i in range(turns):
                    row, body = tool_turn(http, f"Turn {i + 1}: what is 6 * 7?", url)
                    url = f"/c/{body['conversation']['id']}/messages/"
                    row.engine_ms, done = engine_ms(body["conversation"]["id"], done)
                    rows.append(row)
                    print(
                        f"turn {i + 1:2d}: call -> result {row.result_ms:6.1f} ms, "
                        f"call -> next answer's first token {row.next_token_ms:6.1f} ms, "
                        f"wall {row.wall_ms:6.1f} ms (worker {row.engine_ms:.0f} ms)"
                    )
    finally:
        processes_stop([queue])
    return rows


def bare_ms(python: str) -> float:
    """Wall time of ``python -I -c pass`` outside any sandbox, ms."""
    started = time.monotonic()
    subprocess.run([python, "-I", "-c", "pass"], check=True, env={})
    return (time.monotonic() - started) * 1000


def sandbox_bench(runs: int) -> None:
    """Part 1 (module docstring): print and record the sandbox's start."""
    from tools.sandbox import SandboxLimits, python_run

    limits = SandboxLimits.from_settings()
    python_run("pass", limits=limits)  # warm-up: page cache, first exec of bwrap
    sandboxed: list[float] = []
    for _ in range(runs):
        result = python_run("pass", limits=limits)
        if not result.ok:
            raise SystemExit(f"the sandbox failed: {result}")
        sandboxed.append(result.wall_ms)
    bare = [bare_ms(limits.python) for _ in range(runs)]
    rows = [("sandboxed (python_run)", sandboxed), ("bare python3 -I", bare)]
    print(f"run_python start: `pass`, {runs} runs each, ms")
    print(f"{'':24} {'p50':>7} {'p95':>7} {'min':>7} {'max':>7}")
    for name, values in rows:
        figures = [pct(values, 50), pct(values, 95), min(values), max(values)]
        print(f"{name:24} " + " ".join(f"{v:7.1f}" for v in figures))
    p50 = pct(sandboxed, 50)
    verdict = "met" if p50 <= GOAL_P50_MS else "missed"
    print(f"goal p50 <= {GOAL_P50_MS:.0f} ms: {verdict}")
    figures_record(
        bench="tools",
        params=f"`pass`, {runs} runs",
        figures=[
            ("sandbox start p50", p50, "ms", f"<= {GOAL_P50_MS:.0f} ms"),
            ("sandbox start p95", pct(sandboxed, 95), "ms", ""),
            ("bare python3 start p50", pct(bare, 50), "ms", ""),
        ],
    )


def loop_report(rows: list[ToolTurn]) -> None:
    """Part 2 (module docstring): print and record the loop's figures."""
    result = [r.result_ms for r in rows]
    nxt = [r.next_token_ms for r in rows]
    overhead = [r.wall_ms for r in rows]  # the engine is instant
    worker = [r.engine_ms for r in rows]
    print(f"\ntool loop: {len(rows)} turns of one conversation, run_python, ms")
    print(f"{'':34} {'p50':>7} {'p95':>7} {'min':>7} {'max':>7}")
    for name, values in [
        ("call -> result frame", result),
        ("call -> next answer's first token", nxt),
        ("overhead outside the model", overhead),
        ("  of it the worker's (latency_ms)", worker),
    ]:
        figures = [pct(values, 50), pct(values, 95), min(values), max(values)]
        print(f"{name:34} " + " ".join(f"{v:7.1f}" for v in figures))
    total = sum(overhead)
    print(f"overhead outside the model, all {len(rows)} turns: {total:.0f} ms")
    figures_record(
        bench="tools",
        params=f"{len(rows)}-turn conversation, run_python, scripted engine 0 ms",
        figures=[
            ("call -> result frame p50", pct(result, 50), "ms", ""),
            ("call -> result frame p95", pct(result, 95), "ms", ""),
            ("call -> next token p50", pct(nxt, 50), "ms", ""),
            ("call -> next token p95", pct(nxt, 95), "ms", ""),
            ("overhead per turn p50", pct(overhead, 50), "ms", ""),
            ("overhead per turn p95", pct(overhead, 95), "ms", ""),
            (f"overhead, {len(rows)} turns", total, "ms", ""),
            ("worker latency per turn p50", pct(worker, 50), "ms", ""),
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="sandbox starts")
    parser.add_argument("--turns", type=int, default=20, help="tool turns (0: none)")
    args = parser.parse_args()
    django_start({"INFERENCE_DEFAULT_POOL": POOL, "LOG_LEVEL": "WARNING"})
    sandbox_bench(args.runs)
    if args.turns > 0:
        loop_report(loop_bench(args.turns))


if __name__ == "__main__":
    main()

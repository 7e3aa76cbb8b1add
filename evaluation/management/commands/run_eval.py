"""`manage.py run_eval SET --pool P [--compare Q] [--repeat N] [--celery]`.

Runs an evaluation set against a pool through the gateway (as the eval service user:
admission, quotas, billing and moderation apply), shows a tqdm progress bar, then a
table: pass rate with its 95 % Wilson interval over all case runs, errors, latency
p50/p99 (ms), TTFT p50 (ms), tokens and cost. With ``--compare Q`` the same set runs on
Q too and the A/B table lists the cases whose outcome differs. Runs inline (in this
process) unless ``--celery`` (then a Celery worker runs it and this command waits).

Exit status: 0 when the runs completed, whatever their pass rate; 1 on an error
(unknown set or pool, no live worker on the pool, Redis or a run failing).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from redis.exceptions import RedisError
from tqdm import tqdm

from chatsite.errors import DomainError
from evaluation import selectors, services, tasks
from evaluation.models import EvalRun
from evaluation.runs import eval_run_create
from inference import liveness

POLL_S = 0.25


def summary_rows(summaries: list[selectors.RunSummary]) -> list[list[str]]:
    """The table rows (header first) of one or more run summaries."""
    header = [
        "pool",
        "run",
        "case runs",
        "passed",
        "pass rate",
        "95% CI (Wilson)",
        "errors",
        "p50 ms",
        "p99 ms",
        "TTFT p50 ms",
        "prompt tok",
        "completion tok",
        "cost",
    ]
    rows = [header]
    for s in summaries:
        rows.append(
            [
                s.run.pool,
                str(s.run.pk),
                str(s.case_runs),
                str(s.passed),
                f"{s.pass_rate:.1%}",
                f"{s.low:.1%} – {s.high:.1%}",
                str(s.errors),
                "—" if s.p50_ms is None else str(s.p50_ms),
                "—" if s.p99_ms is None else str(s.p99_ms),
                "—" if s.ttft_p50_ms is None else str(s.ttft_p50_ms),
                str(s.prompt_tokens),
                str(s.completion_tokens),
                f"{s.cost:.6f}",
            ]
        )
    return rows


def table(rows: list[list[str]]) -> str:
    """Render ``rows`` (header first) as an aligned plain-text table."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


class Command(BaseCommand):
    help = "Run an evaluation set against a pool (optionally A/B against another)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("set", help="Name of the eval set (see eval_import).")
        parser.add_argument("--pool", required=True, help="Pool to evaluate (A).")
        parser.add_argument("--compare", help="A second pool to compare with (B).")
        parser.add_argument("--repeat", type=int, default=1, help="Runs per case.")
        parser.add_argument(
            "--celery",
            action="store_true",
            help="Run on a Celery worker and wait (default: in this process).",
        )
        parser.add_argument(
            "--start-timeout",
            type=float,
            default=60.0,
            help="With --celery: seconds to wait for a worker to pick the run up.",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        pools = [opts["pool"]] + ([opts["compare"]] if opts["compare"] else [])
        runs: list[EvalRun] = []
        try:
            with transaction.atomic():  # a refused command leaves no run behind
                runs = [
                    eval_run_create(
                        set_name=opts["set"], pool=pool, repeat=opts["repeat"]
                    )
                    for pool in pools
                ]
                for pool in pools:
                    if liveness.workers_live(pool=pool) == 0:
                        raise CommandError(
                            f"No live inference worker serves the pool {pool!r}: "
                            f"start one (manage.py run_inference_worker --pool {pool})."
                        )
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        except RedisError as exc:
            raise CommandError(f"Redis is unavailable: {exc}") from exc
        for run in runs:
            self._run(run, celery=opts["celery"], start_timeout=opts["start_timeout"])
        summaries = []
        for run in runs:
            run.refresh_from_db()
            summaries.append(selectors.run_summary(run=run))
        self.stdout.write(
            f"\nEval set {opts['set']!r}, repeat {opts['repeat']}; pass rate interval: "
            "95 % Wilson score over all case runs.\n"
        )
        self.stdout.write(table(summary_rows(summaries)))
        if len(runs) == 2:
            self._compare(runs[0], runs[1])

    def _run(self, run: EvalRun, *, celery: bool, start_timeout: float) -> None:
        failure: list[BaseException] = []
        worker: threading.Thread | None = None
        if celery:
            tasks.eval_run.delay(run.pk)
        else:

            def execute() -> None:
                try:
                    services.eval_run_execute(run_id=run.pk)
                except BaseException as exc:  # reported below, in the main thread
                    failure.append(exc)
                finally:
                    connection.close()

            worker = threading.Thread(target=execute, daemon=True)
            worker.start()
        began = time.monotonic()
        with tqdm(
            total=run.total, desc=f"{run.eval_set.name} on {run.pool}", mininterval=1
        ) as bar:
            while True:
                run.refresh_from_db()
                bar.total = run.total
                if run.done > bar.n:
                    bar.update(run.done - bar.n)
                if run.status in (EvalRun.Status.COMPLETE, EvalRun.Status.FAILED):
                    break
                if worker is not None and not worker.is_alive():
                    run.refresh_from_db()
                    break
                if (
                    celery
                    and run.status == EvalRun.Status.PENDING
                    and time.monotonic() - began > start_timeout
                ):
                    raise CommandError(
                        f"No Celery worker took run {run.pk} within {start_timeout:.0f}"
                        " s: start one (celery -A chatsite worker) or run without "
                        "--celery."
                    )
                time.sleep(POLL_S)
        if worker is not None:
            worker.join()
        if failure or run.status != EvalRun.Status.COMPLETE:
            reason = run.error or (repr(failure[0]) if failure else run.status)
            raise CommandError(f"Run {run.pk} on {run.pool} failed: {reason}")

    def _compare(self, a: EvalRun, b: EvalRun) -> None:
        _sa, _sb, diffs = selectors.runs_compare(a=a, b=b)
        self.stdout.write(
            f"\nCases whose outcome differs (A = {a.pool}, B = {b.pool}):"
        )
        if not diffs:
            self.stdout.write("  none")
            return
        rows = [["case", f"A {a.pool}", f"B {b.pool}", "A output", "B output"]]
        for d in diffs:
            rows.append(
                [
                    d.name,
                    f"{d.a[0]}/{d.a[1]}",
                    f"{d.b[0]}/{d.b[1]}",
                    _short(d.output_a),
                    _short(d.output_b),
                ]
            )
        self.stdout.write(table(rows))


def _short(text: str, width: int = 40) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"

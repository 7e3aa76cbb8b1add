"""Cost of the gateway in front of the queue: quota Lua and the whole admission path.

    .venv/bin/python bench/gateway_admission.py [--n 2000] [--threads 16]

Runs on the dev services (`make migrate` first). Prints p50/p99 in microseconds of:

- reserve + settle: the two Redis Lua scripts of one request (gateway/quota.py);
- admit: :func:`gateway.generations.generation_admit` (plan lookup, routing queries,
  reservation, admission checks) followed by the release, for one user;
- and the requests/s of admit+release from ``--threads`` threads at once.

It uses a throw-away user and pool (``bench-gw``) and removes its Redis keys afterwards.
Pinned (``--pin on``, :mod:`bench.pinning`): this process (the admitting one) on the
first core, Redis and PostgreSQL on the second; the admit line adds this process's
CPU per admission (ms, from /proc via ``time.process_time``).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LOG_LEVEL", "WARNING")

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.pinning import pinning_plan, service_pids  # noqa: E402
from bench.record import bench_record, pct  # noqa: E402


def main() -> None:

    parser = option_parser(n=2000, threads=16, pin="on")
    args = parser.parse_args()
    pinning = pinning_plan(args.pin == "on")
    pinning.pin(os.getpid(), web=True)
    for pid in service_pids(ROOT / ".var").values():
        pinning.pin_tree(pid, web=False)
    django_start()
    from django.contrib.auth import get_user_model
    from django.db import connection

    from gateway import generations, quota
    from gateway.models import ModelPool, Plan, Subscription
    from inference import keys
    from inference.connections import redis_sync

    user, _ = get_user_model().objects.get_or_create(username="bench-gw")
    pool, _ = ModelPool.objects.get_or_create(name="bench-gw", defaults={"model": "x"})
    plan, _ = Plan.objects.get_or_create(
        name="bench-gw", defaults={"tokens_per_minute": 10**12}
    )
    plan.allowed_pools.set([pool])
    Subscription.objects.update_or_create(user=user, defaults={"plan": plan})
    r = redis_sync()
    r.zadd(keys.workers_key("bench-gw"), {"bench": time.time() + 3600})
    limits = quota.Limits(per_minute=10**12, per_day=10**12, per_month=10**12)
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    request = generations.GenerationRequest(
        user=user,
        messages=messages,
        params={"max_tokens": 64},
        surface=generations.Surface.API,
    )

    def admit_once() -> None:
        job = uuid.uuid4().hex
        generations.generation_admit(request, job_id=job)
        generations.generation_release(user_id=user.pk, job_id=job)

    try:
        lua = []
        for _ in range(args.n):
            job = uuid.uuid4().hex
            t0 = time.perf_counter()
            quota.quota_reserve(user_id=user.pk, job_id=job, tokens=600, limits=limits)
            quota.quota_settle(user_id=user.pk, job_id=job, tokens=100)
            lua.append((time.perf_counter() - t0) * 1e6)
        admit = []
        cpu0 = time.process_time()
        for _ in range(args.n // 4):
            t0 = time.perf_counter()
            admit_once()
            admit.append((time.perf_counter() - t0) * 1e6)
        admit_cpu_us = (time.process_time() - cpu0) / max(1, len(admit)) * 1e6
        per_thread = max(1, args.n // (4 * args.threads))

        def worker() -> None:
            for _ in range(per_thread):
                admit_once()
            connection.close()

        threads = [threading.Thread(target=worker) for _ in range(args.threads)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rate = per_thread * args.threads / (time.perf_counter() - t0)
        print(
            f"reserve+settle (Lua x2): n={len(lua)} p50={statistics.median(lua):.0f} us"
            f" p99={pct(lua, 99):.0f} us"
        )
        print(
            f"admit+release (full path): n={len(admit)} "
            f"p50={statistics.median(admit):.0f} us p99={pct(admit, 99):.0f} us, "
            f"CPU {admit_cpu_us:.0f} us each ({pinning.describe()}, load average "
            f"{os.getloadavg()[0]:.2f})"
        )
        print(f"admit+release, {args.threads} threads: {rate:.0f} requests/s")
        for metric, value, unit, params in (
            ("reserve+settle p50", statistics.median(lua), "us", f"n={len(lua)}"),
            ("reserve+settle p99", pct(lua, 99), "us", f"n={len(lua)}"),
            ("admit+release p50", statistics.median(admit), "us", f"n={len(admit)}"),
            ("admit+release p99", pct(admit, 99), "us", f"n={len(admit)}"),
            (
                "admit+release CPU",
                admit_cpu_us,
                "us",
                f"n={len(admit)}, {pinning.describe()}",
            ),
            ("admit+release rate", rate, "req/s", f"{args.threads} threads"),
        ):
            bench_record(
                bench="gateway_admission",
                metric=metric,
                value=float(value),
                unit=unit,
                params=params,
            )
    finally:
        r.delete(keys.workers_key("bench-gw"))
        for key in keys.scan_iter_all(r, keys.quota_user_pattern(user.pk)):
            r.delete(key)


if __name__ == "__main__":
    main()

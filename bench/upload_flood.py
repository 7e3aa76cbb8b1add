"""One user uploads the costliest PDF within the reading caps in a loop; what does
another user's turn overhead do?

    .venv/bin/python bench/upload_flood.py [--turns 15] [--pages 32]

Starts the web process (uvicorn, tests/stack.py), a scripted worker (`run_inference_worker --engine scripted`, 20 ms
per token, so the figures measure the web tier, not a model) and a Celery worker with
the solo pool of `make run`'s Procfile, on the dev services (run `make migrate`
first). The PDF is a few KB: ``--pages`` pages share one Flate stream of text
operators that show nothing, sized so that the decompressed content summed over the
pages is just under MEMORY_PDF_MAX_CONTENT_BYTES: the most parsing the caps allow,
ending with "no text layer" (or the reader's deadline). Side by side in one run:

the bystander's client TTFT (POST sent -> first `token` frame), ``--turns`` times
each way, alternating: unloaded (no upload, the reader process stopped with SIGSTOP)
and loaded (the uploader posts the PDF every 2 s; its reading runs in the Celery
worker's child process, the upload request only stores it). Alternating puts the same
minutes of a shared machine's other load on both sides.

Prints the upload request's p50 latency, the bystander's TTFT p50 unloaded and loaded
and their ratio (goal: at most 1.5x), and how many uploads were read meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.boot import ROOT, django_start, option_parser  # noqa: E402
from bench.flood import _bystander, _login  # noqa: E402
from bench.record import figures_record  # noqa: E402

POOL = "upload-flood-bench"  # a pool only this run's worker serves
USERS = ("uploader", "bystander")
PASSWORD = "upload-pass-123"


def worst_pdf(pages: int, content_cap: int) -> bytes:
    """A PDF whose ``pages`` pages share one stream of invisible text operators,
    ``pages`` times its length just under ``content_cap`` bytes."""
    from tests.memory.factories import pdf_shared_stream

    op = b"0 0 Td () Tj\n"
    per_page = (content_cap - 4096) // pages
    content = b"BT /F1 12 Tf " + op * (per_page // len(op) - 2) + b"ET"
    return pdf_shared_stream(pages=pages, content=content)


async def _uploader(
    base: str, cookies: dict, pdf: bytes, go: asyncio.Event, stop: asyncio.Event
) -> list[float]:
    """Post ``pdf`` every 2 s while ``go`` is set, until ``stop``; return the requests'
    latencies (ms)."""
    import httpx

    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=base, timeout=60, cookies=cookies) as http:
        i = 0
        while not stop.is_set():
            await go.wait()
            sent = time.monotonic()
            r = await http.post(
                "/documents/upload/",
                files={"file": (f"worst-{i}.pdf", pdf, "application/pdf")},
                headers={"X-CSRFToken": cookies["csrftoken"]},
            )
            latencies.append((time.monotonic() - sent) * 1000)
            if r.status_code != 302:
                print(f"upload refused: {r.status_code} {r.text[:200]}")
            i += 1
            try:
                await asyncio.wait_for(stop.wait(), timeout=2.0)
            except TimeoutError:
                pass
    return latencies


def _descendants(pid: int) -> list[int]:
    """The process ids below ``pid`` (/proc/<pid>/task/*/children, recursively)."""
    found: list[int] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            for child in map(int, children.read_text().split()):
                found += [child, *_descendants(child)]
    return found


def _readers_signal(celery_pid: int, sig: int) -> int:
    """Send ``sig`` to the Celery worker's child processes (the PDF reader); return
    how many got it."""
    children = _descendants(celery_pid)
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, sig)
    return len(children)


async def _run(base: str, args, pdf: bytes, celery_pid: int) -> dict:
    """Alternate the bystander's turns: one with no upload and the reader stopped
    (SIGSTOP), one with uploads and the reader running; the same minutes of a shared
    machine's load fall on both sides."""
    uploader = await _login(base, "uploader", PASSWORD)
    bystander = await _login(base, "bystander", PASSWORD)
    await _bystander(bystander, 2)  # warm-up
    go, stop = asyncio.Event(), asyncio.Event()
    go.set()
    uploads = asyncio.ensure_future(
        _uploader(base, dict(uploader.cookies.items()), pdf, go, stop)
    )
    for _ in range(120):  # until the first PDF is being read
        if (await _statuses()).get("processing"):
            break
        await asyncio.sleep(0.5)
    unloaded: list[float] = []
    loaded: list[float] = []
    reading = 0
    for _ in range(args.turns):
        go.clear()
        _readers_signal(celery_pid, signal.SIGSTOP)
        unloaded += await _bystander(bystander, 1)
        go.set()
        reading += _readers_signal(celery_pid, signal.SIGCONT) > 0
        loaded += await _bystander(bystander, 1)
    statuses = await _statuses()
    stop.set()
    go.set()
    latencies = await uploads
    await uploader.aclose()
    await bystander.aclose()
    return {
        "unloaded": unloaded,
        "loaded": loaded,
        "uploads": latencies,
        "statuses": statuses,
        "reading": reading,
    }


async def _statuses() -> dict[str, int]:
    """The uploader's documents by status (one is ``processing``: being read)."""
    from asgiref.sync import sync_to_async
    from django.db.models import Count

    from memory.models import Document

    def count() -> dict[str, int]:
        rows = (
            Document.objects.filter(user__username="uploader")
            .values("status")
            .annotate(n=Count("id"))
        )
        return {row["status"]: row["n"] for row in rows}

    return await sync_to_async(count)()


def main() -> None:
    parser = option_parser(turns=15, pages=32)
    args = parser.parse_args()
    # No titles or summaries after the bystander's turns: the Celery worker reads PDFs.
    environ = {
        "INFERENCE_DEFAULT_POOL": POOL,
        "LOG_LEVEL": "WARNING",
        "CHAT_BACKGROUND_JOBS": "0",
        "CHAT_MESSAGE_RATE": "10000/m",
    }
    django_start(environ)
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from gateway.models import ModelPool, Plan, Subscription
    from memory.models import Document
    from tests.stack import process_start, processes_stop, running_processes, stack_env

    pool, _ = ModelPool.objects.update_or_create(
        name=POOL,
        defaults={"model": "scripted-1", "engine": ModelPool.Engine.SCRIPTED},
    )
    plan, _ = Plan.objects.get_or_create(name="upload-flood-bench")  # no limits
    plan.allowed_pools.set([pool])
    for name in USERS:
        user, _ = get_user_model().objects.get_or_create(username=name)
        user.set_password(PASSWORD)
        user.save()
        Subscription.objects.update_or_create(user=user, defaults={"plan": plan})
    Document.objects.filter(user__username="uploader").delete()
    pdf = worst_pdf(args.pages, settings.MEMORY_PDF_MAX_CONTENT_BYTES)
    worker = ["--pool", POOL, "--engine", "scripted", "--delay-ms", "20"]
    celery = process_start(
        [ROOT / ".venv/bin/celery", "-A", "chatsite", "worker", "--pool", "solo"]
        + ["--loglevel", "WARNING"],
        stack_env(environ, for_tests=False),
        "celery",
    )
    try:
        with running_processes(worker, for_tests=False) as stack:
            result = asyncio.run(_run(stack.base, args, pdf, celery.pid))
    finally:
        processes_stop([celery])
    documents = Document.objects.filter(user__username="uploader")
    read = documents.filter(status=Document.Status.FAILED).count()
    errors = sorted({d.error[:60] for d in documents.exclude(error="")})
    documents.delete()
    unloaded = [t for t in result["unloaded"] if t == t]
    loaded = [t for t in result["loaded"] if t == t]
    p50_idle, p50_load = statistics.median(unloaded), statistics.median(loaded)
    ratio = p50_load / p50_idle
    upload_p50 = statistics.median(result["uploads"])
    content = settings.MEMORY_PDF_MAX_CONTENT_BYTES
    print(f"PDF: {len(pdf):,} bytes, {args.pages} pages sharing one stream, ")
    print(f"  {content - 4096:,} bytes of content to parse (cap {content:,})")
    print(f"uploads: {len(result['uploads'])}, request p50 {upload_p50:.1f} ms")
    print(f"loaded turns with a reader running: {result['reading']} of {args.turns}")
    print(f"documents when the turns ended: {result['statuses']}")
    print(f"read by the ingest task by the end: {read} ({'; '.join(errors)})")
    print(f"bystander TTFT p50 unloaded: {p50_idle:7.1f} ms  ({len(unloaded)} turns)")
    print(f"bystander TTFT p50 loaded:   {p50_load:7.1f} ms  ({len(loaded)} turns)")
    print(f"ratio loaded/unloaded: {ratio:.2f} (target <= 1.5)")
    print(f"load average {os.getloadavg()}")
    params = f"{args.pages}-page worst PDF every 2 s, {args.turns} turns each side"
    figures_record(
        bench="upload_flood",
        params=params,
        figures=[
            ("bystander TTFT p50 loaded/unloaded", ratio, "x", "<= 1.5"),
            ("upload request p50", upload_p50, "ms", ""),
        ],
    )


if __name__ == "__main__":
    main()

"""Say when `make run` is ready to use: the web process answers and the chat and
embedding workers are serving. Run by the Procfile beside them.

    python scripts/ready.py [--timeout-s 180]

The web process listens a few seconds before the embedding worker has loaded its
model. A message sent in that window is answered without input moderation
(SAFETY_FAIL_CLOSED off: the classifier reads the message's embedding, and with no
embedding worker it lets the text through, logged) and without memory or documents.
So `make run` prints the address first with "starting",
and this prints it again once everything a turn uses is up, or says what is still
missing after ``--timeout-s``. It then waits to be stopped: honcho stops every process
when one exits.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.5


def missing_parts(*, base: str, pools: list[str]) -> list[str]:
    """What is not serving yet: ``"web"`` when ``GET base/healthz`` does not answer
    200 within a second, and each pool of ``pools`` with no live worker (a heartbeat
    in the last WORKER_TTL_S seconds). An empty list: ready."""
    from chatsite.health import HEALTH_PATH
    from inference.liveness import workers_live

    missing = []
    try:
        if httpx.get(base + HEALTH_PATH, timeout=1.0).status_code != 200:
            missing.append("web")
    except httpx.HTTPError:
        missing.append("web")
    missing += [pool for pool in pools if workers_live(pool=pool) == 0]
    return missing


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout-s", type=float, default=180.0)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")
    import django

    django.setup()
    from django.conf import settings

    host = os.environ.get("WEB_HOST", "127.0.0.1")
    base = f"http://{host}:{os.environ.get('WEB_PORT', '8000')}"
    pools = [settings.INFERENCE_DEFAULT_POOL, settings.EMBEDDING_POOL]
    deadline = time.monotonic() + args.timeout_s
    missing = missing_parts(base=base, pools=pools)
    while missing and time.monotonic() < deadline:
        time.sleep(POLL_S)
        missing = missing_parts(base=base, pools=pools)
    if missing:
        print(
            f"Not ready after {args.timeout_s:.0f} s: no answer from "
            + ", ".join(missing)
            + " (see its lines above).",
            flush=True,
        )
    else:
        print(f"\n  Ready: {base}/  (login demo / demo)\n", flush=True)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    main()

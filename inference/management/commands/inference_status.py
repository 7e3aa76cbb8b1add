"""`manage.py inference_status [--pool NAME] [--json]`: fleet and backlog per pool."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand

from inference.selectors import pool_status, pools_list


class Command(BaseCommand):
    help = (
        "Per pool: live workers, slots busy/free, queue depth (waiting/running) and "
        "the age of the oldest waiting job."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--pool", action="append", help="only this pool (repeat)")
        parser.add_argument("--json", action="store_true", help="print JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        statuses = [pool_status(pool=p) for p in (opts["pool"] or pools_list())]
        if opts["json"]:
            self.stdout.write(json.dumps([s.as_dict() for s in statuses], indent=2))
            return
        if not statuses:
            self.stdout.write("no pools (no queue and no worker heartbeat in Redis)")
            return
        header = f"{'pool':<16} {'kind':<9} {'workers':>7} {'busy':>5} {'free':>5} {'waiting':>8} {'running':>8} {'oldest_s':>9}"
        self.stdout.write(header)
        for s in statuses:
            oldest = "-" if s.oldest_waiting_s is None else f"{s.oldest_waiting_s:.1f}"
            self.stdout.write(
                f"{s.pool:<16} {s.kind or '-':<9} {s.live_workers:>7} {s.busy:>5} {s.free:>5} "
                f"{s.waiting:>8} {s.running:>8} {oldest:>9}"
            )
            for w in s.workers:
                dim = f" {w.dim}-d" if w.dim else ""
                self.stdout.write(
                    f"  {w.worker_id}: {w.engine}/{w.model}{dim} {w.busy}/{w.slots} "
                    f"busy, heartbeat {w.heartbeat_age_s:.1f}s ago"
                )

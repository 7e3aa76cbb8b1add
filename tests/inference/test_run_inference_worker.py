"""The worker command's process set-up (inference/management/commands/run_inference_worker.py)."""

import gc

from django.core.management import call_command

from inference.management.commands import run_inference_worker
from inference.worker import Worker


def test_the_command_freezes_start_up_objects_once_the_engine_is_ready(monkeypatch):
    handed: list[object] = []

    async def run(self, *, started=None):
        handed.append(started)

    monkeypatch.setattr(Worker, "run", run)
    call_command("run_inference_worker", "--engine", "scripted", "--pool", "frozen")
    assert handed == [run_inference_worker.startup_freeze]


def test_startup_freeze_moves_live_objects_out_of_the_collectors_scans():
    before = gc.get_freeze_count()
    kept = [[] for _ in range(5000)]  # start-up state: lives as long as the process
    try:
        run_inference_worker.startup_freeze()
        assert gc.get_freeze_count() >= before + len(kept)
        young = gc.get_objects(generation=0)
        assert not any(obj is kept for obj in young)
    finally:
        gc.unfreeze()  # this test process goes on collecting as before

"""scripts/ready.py: `make run` says "Ready" only once the web process answers and the
chat and embedding pools have a live worker."""

from __future__ import annotations

import pytest

from scripts.ready import missing_parts
from tests.conftest import fake_heartbeat, fake_heartbeat_stop
from tests.stack import free_port, running_processes

pytestmark = pytest.mark.django_db(transaction=True)


def test_without_a_web_process_or_workers_everything_is_missing():
    base = f"http://127.0.0.1:{free_port()}"
    assert missing_parts(base=base, pools=["default", "embed"]) == [
        "web",
        "default",
        "embed",
    ]


@pytest.mark.slow
def test_ready_once_the_web_answers_and_each_pool_has_a_live_worker():
    worker = ["--pool", "default", "--engine", "scripted"]
    with running_processes(worker) as stack:
        assert missing_parts(base=stack.base, pools=["default", "embed"]) == ["embed"]
        fake_heartbeat("embed")
        try:
            assert missing_parts(base=stack.base, pools=["default", "embed"]) == []
        finally:
            fake_heartbeat_stop("embed")

"""Admission's reads of other slots (gateway/generations/reads.py): the routed pool's
load and the conversation's worker come back in the token reservation's round trip,
and the API request's count goes in its script: admitting is one round trip."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.connection

from chatsite.errors import PoolSaturated
from gateway import generations, requestrate
from inference import affinity, jobs, keys, protocol
from inference import client as inference_client
from inference.connections import redis_sync
from tests.conftest import fake_heartbeat
from tests.gateway import factories

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = [{"role": "user", "content": "Which worker answers me?"}]


def _request(
    user: Any, messages: list[dict[str, str]] = MESSAGES, **fields: Any
) -> generations.GenerationRequest:
    return generations.GenerationRequest(
        user=user,
        messages=messages,
        params={"max_tokens": 8},
        surface=generations.Surface.API,
        model="reads",
        **fields,
    )


@pytest.fixture
def routed(user) -> None:
    pool = factories.pool("reads", queue_threshold=1)
    factories.subscribe(
        user, factories.plan(pools=[pool], requests_per_minute=10, tokens_per_day=10**6)
    )
    fake_heartbeat("reads")


@pytest.fixture
def round_trips(monkeypatch) -> list[int]:
    """Counts every request the process sends to Redis (a pipeline is one)."""
    sent: list[int] = []
    real = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        sent.append(1)
        real(self, command, check_health)

    monkeypatch.setattr(
        redis.connection.AbstractConnection, "send_packed_command", counted
    )
    return sent


@pytest.mark.usefixtures("routed")
def test_admitting_a_counted_request_is_one_round_trip(user, settings, round_trips):
    settings.INFERENCE_AFFINITY = True
    conversation = affinity.affinity_of(user_ref=str(user.pk), messages=MESSAGES)
    redis_sync().set(keys.affinity_key("reads", conversation), "worker-7")
    warm = generations.generation_admit(_request(user), job_id="warm")  # seeds days
    generations.generation_release(user_id=user.pk, job_id=warm.job_id)
    counter = requestrate.RequestCounter(
        user_id=user.pk, key_id=3, user_limit=10, key_limit=None
    )
    round_trips.clear()
    admission = generations.generation_admit(
        _request(user, request_count=counter), job_id="one"
    )
    assert len(round_trips) == 1
    assert admission.pool == "reads"
    assert counter.counted is not None and counter.counted.remaining == 9
    assert admission.affinity == affinity.AffinityRead(
        pool="reads", affinity=conversation, worker="worker-7"
    )
    generations.generation_release(user_id=user.pk, job_id="one")


@pytest.mark.usefixtures("routed")
def test_the_load_read_with_the_reservation_still_refuses_a_full_pool(user):
    for queued in ("queued-1", "queued-2"):  # over its threshold of 1
        inference_client.job_enqueue(pool="reads", job=_job(queued))
    with pytest.raises(PoolSaturated):
        generations.generation_admit(_request(user), job_id="refused")
    assert not redis_sync().exists(keys.reservation_key(user.pk, "refused"))


def _job(job_id: str) -> protocol.Job:
    return jobs.job_build(
        job_id=job_id,
        messages=MESSAGES,
        params={},
        user_ref="x",
        enqueued_at=0.0,
        timeout_s=60,
    )


def test_a_worker_read_ahead_routes_without_reading_it_again(round_trips):
    job = _job("ahead")
    job.affinity = "conv-1"
    read = affinity.AffinityRead(pool="reads", affinity="conv-1", worker=None)
    assert affinity.job_route(redis_sync(), pool="reads", job=job, read=read) is None
    assert round_trips == []  # none recorded: nothing else to read
    other = affinity.AffinityRead(pool="other", affinity="conv-1", worker="w")
    assert affinity.job_route(redis_sync(), pool="reads", job=job, read=other) is None
    assert len(round_trips) == 1  # read for another pool: read here


def _worker_state(worker: str, *, busy: int) -> None:
    redis_sync().hset(
        keys.worker_key(worker),
        mapping={
            "heartbeat": f"{time.time():.3f}",
            "slots": 2,
            "busy": busy,
            "preemptible": 0,
            "stopping": 0,
            "pool": "reads",
        },
    )


@pytest.mark.usefixtures("routed")
def test_the_worker_seen_last_is_read_with_the_reservation(user, settings, round_trips):
    settings.INFERENCE_AFFINITY = True
    messages = [{"role": "user", "content": "Read my worker ahead, please."}]
    conversation = affinity.affinity_of(user_ref=str(user.pk), messages=messages)
    redis_sync().set(keys.affinity_key("reads", conversation), "w7")
    _worker_state("w7", busy=0)
    job = _job("routed")
    job.affinity = conversation

    def admit_and_route(job_id: str) -> tuple[str | None, int]:
        """The route of one admission and the round trips both took."""
        round_trips.clear()
        admission = generations.generation_admit(
            _request(user, messages=messages), job_id=job_id
        )
        worker = affinity.job_route(
            redis_sync(), pool="reads", job=job, read=admission.affinity
        )
        sent = len(round_trips)
        generations.generation_release(user_id=user.pk, job_id=job_id)
        return worker, sent

    admit_and_route("warm")  # seeds the day's counters
    affinity.affinity_hints_forget()
    assert admit_and_route("first") == ("w7", 2)  # the state read after
    assert admit_and_route("second") == ("w7", 1)  # read with the reservation
    _worker_state("w7", busy=2)  # full: its state is read fresh each time
    assert admit_and_route("full") == (None, 1)
    redis_sync().set(keys.affinity_key("reads", conversation), "w8")
    assert admit_and_route("moved") == (None, 2)  # not the one read ahead: read
    _worker_state("w8", busy=0)
    assert admit_and_route("w8") == ("w8", 1)

"""Conversation affinity over real Redis and real workers (inference/affinity.py)."""

import json
import time

from prometheus_client.parser import text_string_to_metric_families

from inference import affinity, keys, protocol
from inference import client as inference_client
from inference.connections import redis_sync
from inference.engines.scripted import ScriptedEngine
from inference.metrics import metrics_render
from tests.inference.helpers import terminal, wait_events, wait_until, worker_state

POOL = "aff"


def routes(outcome: str) -> float:
    """The AFFINITY_ROUTES sample of POOL for ``outcome`` (0 when absent)."""
    return _sample("inference:affinity_routes_total", pool=POOL, outcome=outcome)


def fallbacks() -> float:
    return _sample("inference:affinity_fallbacks_total", pool=POOL)


def _sample(name: str, **labels: str) -> float:
    body, _ = metrics_render()
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0.0


def conversation(turns: int) -> list[dict[str, str]]:
    """The messages of a conversation's turn ``turns`` (1-based): same opening."""
    messages = [{"role": "system", "content": "Be brief."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}"})
        if i < turns - 1:
            messages.append({"role": "assistant", "content": f"answer {i}"})
    return messages


def submit(
    job_id: str, *, turns: int = 1, user: str = "7", max_tokens: int = 3
) -> protocol.Job:
    """Route and enqueue a turn the way gateway.generations.start does."""
    now = time.time()
    messages = conversation(turns)
    job = protocol.Job(
        job_id=job_id,
        messages=messages,
        params={"max_tokens": max_tokens},
        user_ref=user,
        enqueued_at=now,
        deadline=now + 60,
        affinity=affinity.affinity_of(user_ref=user, messages=messages),
    )
    worker = affinity.job_route(redis_sync(), pool=POOL, job=job)
    inference_client.job_enqueue(pool=POOL, job=job, worker=worker)
    return job


def served_by(job_id: str, timeout: float = 10.0) -> str:
    events = wait_events(job_id, terminal, timeout=timeout)
    assert events[-1].type == "done", events[-1]
    return events[0].data["worker"]


def two_workers(start_worker, **options):
    """Two workers of POOL, each visible (its own heartbeat) before returning."""
    handles = [
        start_worker(ScriptedEngine(text="a b c"), pool=POOL, **options)
        for _ in range(2)
    ]
    for h in handles:
        wait_until(lambda h=h: worker_state(h.worker.worker_id).get("heartbeat"))
    return handles


def test_affinity_key_is_the_same_for_every_turn_and_differs_by_user():
    first = affinity.affinity_of(user_ref="7", messages=conversation(1))
    assert first == affinity.affinity_of(user_ref="7", messages=conversation(9))
    assert first != affinity.affinity_of(user_ref="8", messages=conversation(1))
    assert affinity.affinity_of(user_ref="7", messages=[]) == ""


def test_every_follow_up_goes_to_the_worker_that_served_the_previous_turn(
    start_worker,
):
    two_workers(start_worker, concurrency=1)
    hits = routes("hit")
    first = served_by(submit("t1").job_id)
    for turn in range(2, 7):
        assert served_by(submit(f"t{turn}", turns=turn).job_id) == first
    assert routes("hit") - hits == 5
    # the worker recorded itself, and its freed slot shows at once (busy 0)
    aff = affinity.affinity_of(user_ref="7", messages=conversation(1))
    assert redis_sync().get(keys.affinity_key(POOL, aff)) == first
    wait_until(lambda: worker_state(first)["busy"] == "0", timeout_s=0.3)


def test_a_saturated_preferred_worker_is_passed_over_for_a_free_one(start_worker):
    a, b = two_workers(start_worker, concurrency=1)
    first = served_by(submit("t1").job_id)
    other = b if first == a.worker.worker_id else a
    # the preferred worker's only slot runs a long job
    now = time.time()
    long_job = protocol.Job(
        job_id="long",
        messages=[{"role": "user", "content": "long"}],
        params={"max_tokens": 100000, "script": {"cycle": True, "delay_ms": 20}},
        enqueued_at=now,
        deadline=now + 60,
    )
    inference_client.job_enqueue(pool=POOL, job=long_job, worker=first)
    wait_events("long", lambda ev: any(e.type == "token" for e in ev))
    wait_until(lambda: worker_state(first)["busy"] == "1")
    saturated = routes("miss_saturated")
    follow = submit("t2", turns=2)
    assert served_by(follow.job_id) == other.worker.worker_id
    assert routes("miss_saturated") - saturated == 1
    inference_client.job_cancel(job_id="long")


def test_a_dead_preferred_worker_is_passed_over(start_worker):
    a, b = two_workers(start_worker, concurrency=1)
    first = served_by(submit("t1").job_id)
    gone, other = (a, b) if first == a.worker.worker_id else (b, a)
    gone.stop()
    dead = routes("miss_dead")
    follow = submit("t2", turns=2)
    assert served_by(follow.job_id) == other.worker.worker_id
    assert routes("miss_dead") - dead == 1


def test_a_job_its_preferred_worker_never_takes_goes_to_the_pool_after_the_bound(
    start_worker,
):
    # The preferred worker died right after the routing decision: it looked live (a
    # fresh heartbeat, a free slot) but never reads its stream. Bound: wait 0.5 s +
    # one sweep interval 0.1 s.
    live = start_worker(
        ScriptedEngine(text="a b c"),
        pool=POOL,
        affinity_wait_s=0.5,
        affinity_sweep_s=0.1,
    )
    r = redis_sync()
    r.hset(
        keys.worker_key("ghost"),
        mapping={
            "heartbeat": f"{time.time():.3f}",
            "slots": 1,
            "busy": 0,
            "stopping": 0,
            "pool": POOL,
        },
    )
    aff = affinity.affinity_of(user_ref="7", messages=conversation(2))
    r.set(keys.affinity_key(POOL, aff), "ghost")
    moved = fallbacks()
    hits = routes("hit")
    sent = time.time()
    submit("stuck", turns=2)
    assert routes("hit") - hits == 1
    assert r.xlen(keys.worker_queue_key(POOL, "ghost")) == 1
    events = wait_events("stuck", terminal, timeout=10)
    waited = events[0].data["queue_ms"] / 1000
    assert events[0].data["worker"] == live.worker.worker_id
    assert 0.5 <= waited < 0.6 + 1.0  # the bound, plus slack for a busy machine
    assert time.time() - sent < 5
    assert r.xlen(keys.worker_queue_key(POOL, "ghost")) == 0
    assert fallbacks() - moved == 1


def test_a_job_a_dead_worker_took_from_its_own_stream_is_run_by_another(
    start_worker,
):
    r = redis_sync()
    now = time.time()
    job = protocol.Job(
        job_id="orphan",
        messages=[{"role": "user", "content": "hi"}],
        params={"max_tokens": 3},
        enqueued_at=now,
        deadline=now + 60,
        affinity="c1",
    )
    stream = keys.worker_queue_key(POOL, "ghost")
    r.xgroup_create(stream, protocol.GROUP, id="0", mkstream=True)
    inference_client.job_enqueue(pool=POOL, job=job, worker="ghost")
    # the ghost takes it, then dies without a heartbeat
    taken = r.xreadgroup(protocol.GROUP, "ghost", {stream: ">"}, count=1)
    assert taken and taken[0][1]
    live = start_worker(ScriptedEngine(text="a b"), pool=POOL, reclaim_s=0.2)
    assert served_by("orphan", timeout=15) == live.worker.worker_id
    wait_until(lambda: r.xlen(stream) == 0)


def test_without_affinity_the_job_goes_to_the_pool_queue_as_before(start_worker):
    two_workers(start_worker, concurrency=1)
    now = time.time()
    job = protocol.Job(
        job_id="plain",
        messages=conversation(1),
        params={"max_tokens": 3},
        enqueued_at=now,
        deadline=now + 60,
    )
    assert "affinity" not in json.loads(job.to_fields()["job"])
    assert affinity.job_route(redis_sync(), pool=POOL, job=job) is None
    inference_client.job_enqueue(pool=POOL, job=job)
    served_by("plain")
    assert redis_sync().keys("inf:aff:*") == []


def test_gateway_submit_routes_by_affinity_and_the_setting_turns_it_off(
    start_worker, settings
):
    from gateway.generations.start import generation_submit

    two_workers(start_worker, concurrency=1)
    messages = conversation(1)

    def send(job_id: str, turns: int) -> str:
        generation_submit(
            job_id=job_id,
            messages=conversation(turns),
            params={"max_tokens": 3},
            user_ref="7",
            user_id=7,
            pool=POOL,
        )
        return served_by(job_id)

    settings.INFERENCE_AFFINITY = True
    first = send("g1", 1)
    hits = routes("hit")
    assert [send(f"g{t}", t) for t in (2, 3)] == [first, first]
    assert routes("hit") - hits == 2

    settings.INFERENCE_AFFINITY = False
    r = redis_sync()
    counted = routes("hit") + routes("miss_new")
    # the same conversation's next turn: any worker, by the pool's queue
    generation_submit(
        job_id="off",
        messages=conversation(4),
        params={"max_tokens": 3},
        user_ref="7",
        user_id=7,
        pool=POOL,
    )
    served_by("off")
    assert routes("hit") + routes("miss_new") == counted
    # today's entry, on the pool's queue (a pool nobody serves keeps it to read)
    generation_submit(
        job_id="idle",
        messages=messages,
        params={},
        user_ref="8",
        user_id=8,
        pool="aff-idle",
    )
    [(_id, fields)] = r.xrange(keys.queue_key("aff-idle"))
    assert "affinity" not in json.loads(fields["job"])
    assert r.keys("inf:qw:*") == [] or all(r.xlen(k) == 0 for k in r.keys("inf:qw:*"))
    aff = affinity.affinity_of(user_ref="8", messages=messages)
    assert r.get(keys.affinity_key("aff-idle", aff)) is None


def test_a_worker_reads_its_own_stream_first_and_takes_no_more_than_its_slots(
    start_worker,
):
    now = time.time()

    def job(job_id: str, max_tokens: int) -> protocol.Job:
        return protocol.Job(
            job_id=job_id,
            messages=[{"role": "user", "content": "hi"}],
            params={"max_tokens": max_tokens},
            enqueued_at=now,
            deadline=now + 60,
        )

    inference_client.job_enqueue(pool=POOL, job=job("pooled", 3))
    inference_client.job_enqueue(pool=POOL, job=job("mine", 2000), worker="w1")
    start_worker(
        ScriptedEngine(text="tok ", cycle=True, delay_ms=20),
        pool=POOL,
        worker_id="w1",
        concurrency=1,
    )
    wait_events("mine", lambda ev: any(e.type == "token" for e in ev))
    # the pool's job waits in Redis for the slot, not in the worker
    assert inference_client.generation_events(job_id="pooled") == []
    assert redis_sync().xinfo_groups(keys.queue_key(POOL))[0]["pending"] == 0
    inference_client.job_cancel(job_id="mine")
    assert served_by("pooled") == "w1"


def test_a_worker_busy_only_with_background_work_is_not_saturated() -> None:
    # A title or summary holding the only slot gives way to an interactive turn
    # (the intake preempts it), so the conversation still goes to its worker.
    r = redis_sync()
    job = protocol.Job(
        job_id="bg-busy",
        messages=conversation(2),
        params={},
        enqueued_at=time.time(),
        deadline=time.time() + 60,
        affinity=affinity.affinity_of(user_ref="9", messages=conversation(2)),
    )
    r.set(keys.affinity_key(POOL, job.affinity), "busyone")
    state = {
        "heartbeat": f"{time.time():.3f}",
        "slots": 1,
        "busy": 1,
        "stopping": 0,
        "pool": POOL,
    }
    r.hset(keys.worker_key("busyone"), mapping={**state, "preemptible": 1})
    assert affinity.job_route(r, pool=POOL, job=job) == "busyone"
    r.hset(keys.worker_key("busyone"), mapping={**state, "preemptible": 0})
    assert affinity.job_route(r, pool=POOL, job=job) is None

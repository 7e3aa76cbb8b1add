"""Every Redis key is Redis Cluster safe (inference/keys/): the keys one Lua script,
MULTI/EXEC or multi-key command touches map to one slot, the package names every key,
and no key is built by hand elsewhere."""

from __future__ import annotations

import ast
import datetime as dt
import importlib
import pathlib
import pkgutil
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis.client import Pipeline
from redis.cluster import key_slot

from gateway import quota, quota_reset, quota_sweep, requestrate
from inference import client as inference_client
from inference import keys, protocol
from inference.connections import redis_sync

ROOT = pathlib.Path(__file__).resolve().parent.parent
KEY_PACKAGE = ROOT / "inference" / "keys"
USER = 424242
JOB = str(uuid.uuid4())
DAY = dt.date(2026, 5, 28)
MINUTE = 29_666_666


def _slots(names: list[str]) -> set[int]:
    return {key_slot(name.encode()) for name in names}


def _tag(name: str) -> str | None:
    """The hash tag of a key as Redis Cluster reads it (None: the whole key)."""
    start = name.find("{")
    end = name.find("}", start + 1)
    return name[start + 1 : end] if start >= 0 and end > start + 1 else None


# Every key of the product, one per pattern, with real ids; the value: the tag it must
# carry (None: used alone only, so hashed whole).
EVERY_KEY = {
    keys.queue_key("small"): "p:small",
    keys.background_queue_key("small"): "p:small",
    keys.workers_key("small"): "p:small",
    keys.worker_key("w-1"): "w:w-1",
    keys.gen_key(JOB): JOB,
    keys.final_key(JOB): JOB,
    keys.cancel_key(JOB): JOB,
    keys.watch_key(JOB): JOB,
    keys.detached_key(JOB): JOB,
    keys.moderation_key(JOB): JOB,
    keys.attempts_key(JOB): JOB,
    keys.hub_wake_key("hub1"): "h:hub1",
    keys.quota_minute_key(USER, MINUTE): f"u:{USER}",
    keys.quota_day_key(USER, DAY): f"u:{USER}",
    keys.quota_month_key(USER, DAY): f"u:{USER}",
    keys.reservation_key(USER, JOB): f"u:{USER}",
    keys.reservations_key(USER): f"u:{USER}",
    keys.unsubmitted_key(JOB): None,  # checked below: a bucket tag
    keys.rpm_user_key(USER, MINUTE): f"u:{USER}",
    keys.rpm_key_key(USER, 7, MINUTE): f"u:{USER}",
    keys.cache_exact_key("ab" * 32): None,
    keys.cache_pending_key(JOB): JOB,
    keys.job_key(JOB): JOB,
    keys.retries_key(JOB): JOB,
    keys.ratelimit_refused_key("chat", "cd" * 32): None,
    keys.login_failures_key("ef" * 32): "l:" + "ef" * 32,
    keys.login_locked_key("ef" * 32): "l:" + "ef" * 32,
    keys.verdict_key("embedded", "01" * 32): None,
    keys.vector_key("01" * 32): None,
    keys.tool_busy_key(12): "c:12",
    keys.tool_step_key(34): "m:34",
    keys.tool_step_run_key(34): "m:34",
    keys.tool_params_key(34): "m:34",
    keys.tool_stop_key(34): "m:34",
}

# What one script / MULTI / multi-key command touches together (inference.client,
# inference.worker, gateway.fallback, gateway.quota*, gateway.requestrate, ...).
GROUPS = {
    "terminal append": [keys.gen_key(JOB), keys.final_key(JOB)],
    "worker start": [keys.final_key(JOB), keys.cancel_key(JOB), keys.gen_key(JOB)],
    "fallback retry": [
        keys.gen_key(JOB),
        keys.final_key(JOB),
        keys.cancel_key(JOB),
        keys.retries_key(JOB),
    ],
    "attach / detach": [keys.watch_key(JOB), keys.detached_key(JOB)],
    "a job's keys (purge)": keys.job_keys(JOB),
    "one request's embedding streams (XREAD)": [
        keys.gen_key(j) for j in keys.job_ids_grouped(JOB, 5)
    ],
    "quota reserve / settle / reset": [
        keys.quota_minute_key(USER, MINUTE),
        keys.quota_day_key(USER, DAY),
        keys.quota_month_key(USER, DAY),
        keys.reservations_key(USER),
        *[keys.reservation_key(USER, str(uuid.uuid4())) for _ in range(3)],
    ],
    "API request rate": [
        keys.rpm_user_key(USER, MINUTE),
        keys.rpm_key_key(USER, 99, MINUTE),
    ],
    "sign-in lockout": [
        keys.login_failures_key("ab" * 32),
        keys.login_locked_key("ab" * 32),
    ],
    "a pool": [
        keys.queue_key("small"),
        keys.background_queue_key("small"),
        keys.workers_key("small"),
    ],
}


@pytest.mark.parametrize("name", sorted(EVERY_KEY))
def test_every_key_carries_the_tag_of_its_owner(name: str) -> None:
    assert _tag(name) == EVERY_KEY[name] or (
        EVERY_KEY[name] is None and name.startswith("gw:unsubmitted:{r:")
    )


def _key_docs() -> str:
    """The docstrings of inference/keys/: the package's and each of its modules'."""
    modules = [keys] + [
        importlib.import_module(f"{keys.__name__}.{info.name}")
        for info in pkgutil.iter_modules(keys.__path__)
    ]
    return "\n".join(module.__doc__ or "" for module in modules)


def test_every_key_pattern_is_listed_in_the_key_docstrings() -> None:
    doc = _key_docs()
    for name in EVERY_KEY:
        prefix = ":".join(name.split(":")[:2])  # e.g. inf:gen, gw:quota
        assert prefix in doc, f"{name}: {prefix} not described in inference/keys/"


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_keys_used_together_map_to_one_slot(group: str) -> None:
    assert len(_slots(GROUPS[group])) == 1, GROUPS[group]


def test_users_jobs_and_buckets_spread_over_slots() -> None:
    users = _slots([keys.reservations_key(u) for u in range(200)])
    jobs = _slots([keys.gen_key(str(uuid.uuid4())) for _ in range(200)])
    assert len(users) > 150 and len(jobs) > 150
    assert len(_slots(keys.unsubmitted_keys())) == keys.UNSUBMITTED_BUCKETS
    assert {keys.unsubmitted_key(str(uuid.uuid4())) for _ in range(500)} == set(
        keys.unsubmitted_keys()
    )


def test_pools_and_sweep_members_read_back_from_their_keys() -> None:
    assert keys.pool_from_queue_key(keys.queue_key("big-1")) == "big-1"
    assert keys.pool_from_workers_key(keys.workers_key("big-1")) == "big-1"
    member = keys.unsubmitted_member(USER, JOB)
    assert keys.unsubmitted_member_parse(member) == (USER, JOB)


# --- the scripts: every key they touch is in KEYS, all in one slot ---------------


def _lua_scripts() -> Iterator[tuple[str, str]]:
    for path in ROOT.glob("[a-z]*/**/*.py"):
        text = path.read_text()
        if '_LUA = """' not in text or "/tests/" in str(path):
            continue
        module = importlib.import_module(
            ".".join(path.relative_to(ROOT).with_suffix("").parts)
        )
        for name, value in vars(module).items():
            if name.endswith("_LUA") and isinstance(value, str):
                yield f"{module.__name__}.{name}", value


# Scripts that read keys of many slots of ONE node on purpose, sent on a connection to
# that node only: the cluster stream hub's read (inference/streams_cluster.py; flagged
# no-writes + allow-cross-slot-keys, keys in ARGV so Redis 6 takes it too).
NODE_LOCAL_SCRIPTS = {"inference.streams_cluster.READ_LUA"}


def test_every_lua_script_touches_only_keys_it_is_given() -> None:
    scripts = dict(_lua_scripts())
    assert (
        len(scripts) >= 8
    )  # quota (3), request rate, fallback, client, worker, waiting
    assert NODE_LOCAL_SCRIPTS <= set(scripts)
    for name, script in scripts.items():
        if name in NODE_LOCAL_SCRIPTS:
            assert "no-writes" in script, name
            continue
        for line in script.splitlines():
            keyless = "redis.call('TIME')" in line  # a command that names no key
            if "redis.call(" in line and not keyless:
                assert "KEYS[" in line, f"{name}: a key not from KEYS: {line.strip()}"


@pytest.fixture
def evals(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The KEYS of every EVAL / EVALSHA the product sends (directly or pipelined)."""
    seen: list[list[str]] = []

    def spy(real: Any) -> Any:
        def execute_command(self: Any, *args: Any, **options: Any) -> Any:
            if str(args[0]).upper() in {"EVAL", "EVALSHA"}:
                count = int(args[2])
                seen.append([str(k) for k in args[3 : 3 + count]])
            return real(self, *args, **options)

        return execute_command

    client_class = type(redis_sync())
    monkeypatch.setattr(
        client_class, "execute_command", spy(client_class.execute_command)
    )
    monkeypatch.setattr(Pipeline, "execute_command", spy(Pipeline.execute_command))
    return seen


@pytest.mark.django_db
def test_the_quota_and_rate_scripts_run_on_one_slot(evals: list[list[str]]) -> None:
    limits = quota.Limits(per_minute=10_000, per_day=10_000, per_month=10_000)
    jobs = [str(uuid.uuid4()) for _ in range(3)]
    for job in jobs:
        quota.quota_reserve(user_id=USER, job_id=job, tokens=100, limits=limits)
    quota_reset.quota_reset(user_id=USER)
    quota.quota_settle(user_id=USER, job_id=jobs[0], tokens=50)
    quota.quota_release(user_id=USER, job_id=jobs[1])
    assert quota_sweep.quota_reservations_sweep(older_than_s=-60) == 1  # jobs[2]
    requestrate.request_count(user_id=USER, key_id=5, user_limit=10, key_limit=10)
    inference_client.generation_fail_on(
        redis_sync(), job_id=JOB, code=protocol.ERROR_ENGINE, message="failed"
    )
    assert len(evals) >= 9
    for touched in evals:
        assert len(_slots(touched)) == 1, touched


# --- no key built by hand outside inference/keys/ --------------------------------

# A string that begins like one of our keys: the tiers' prefixes, and each key's
# first two segments (``chat:toolstep``, ``safety:verdict``, ...).
_PREFIXES = tuple(
    {"inf:", "gw:"} | {":".join(name.split(":")[:2]) + ":" for name in EVERY_KEY}
)
_APPS = ["accounts", "audit", "chatsite", "conversations", "evaluation", "gateway"]
_APPS += ["inference", "memory", "safety", "tools"]


def _hand_built() -> Iterator[str]:
    for app in _APPS:
        for path in (ROOT / app).rglob("*.py"):
            if path.is_relative_to(KEY_PACKAGE) or "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                text = None
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    text = node.value
                elif isinstance(node, ast.JoinedStr) and node.values:
                    first = node.values[0]
                    if isinstance(first, ast.Constant):
                        text = str(first.value)
                if text and text.startswith(_PREFIXES) and " " not in text:
                    yield f"{path.relative_to(ROOT)}:{node.lineno}: {text!r}"


def test_no_key_is_built_outside_the_key_package() -> None:
    assert list(_hand_built()) == []

"""A Redis Sentinel group of a test: a master, one replica and one Sentinel, each a
real redis-server on a free loopback port (tests/inference/test_sentinel.py).

The Sentinel declares the master down after DOWN_AFTER_MS without an answer and, with
a quorum of 1 (it is alone), promotes the replica: a failover takes 2-4 s.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import redis.sentinel

from tests.faults import redis_binary
from tests.stack import free_port

SERVICE = "mymaster"
# How long the master may be silent before the Sentinel calls it down, ms (the
# Sentinel default is 30,000; small so the drill stays short). Not smaller: the
# Sentinel pings every min(1 s, this); at 500 ms, on a loaded machine, it answered
# "no usable master" just after a completed failover (most likely a late PING reply
# flagging the new master down) and the async client's next connection failed.
DOWN_AFTER_MS = 2000


def wait_for(
    predicate: Callable[[], Any], *, what: str, timeout_s: float = 20.0
) -> Any:
    """Poll ``predicate()`` every 50 ms until it returns a truthy value (a Redis error
    counts as not yet); return the value. Raises AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(redis.RedisError):
            value = predicate()
            if value:
                return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class SentinelGroup:
    """Master, replica and Sentinel; :attr:`url` is the product's REDIS_URL for them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.master_port, self.replica_port = free_port(), free_port()
        self.sentinel_port = free_port()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # The master sends its first full sync at once (Redis 7 waits 5 s by default
        # for more replicas to share it).
        self._start("master", self.master_port, ["--repl-diskless-sync-delay", "0"])
        self._start(
            "replica",
            self.replica_port,
            ["--replicaof", "127.0.0.1", str(self.master_port)],
        )
        conf = folder / "sentinel.conf"  # Sentinel rewrites its file: a copy of ours
        conf.write_text(
            f"port {self.sentinel_port}\n"
            "bind 127.0.0.1\n"
            f"dir {folder}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.master_port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} 10000\n"
        )
        self.procs["sentinel"] = subprocess.Popen(
            [redis_binary(), str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.sentinel = redis.Redis(port=self.sentinel_port, decode_responses=True)
        wait_for(
            lambda: (
                self.server(self.replica_port).info("replication")["master_link_status"]
                == "up"
            ),
            what="the replica to sync",
        )
        # A Sentinel promotes only a replica it knows (from the master's INFO).
        wait_for(
            lambda: self.sentinel.sentinel_slaves(SERVICE),
            what="the Sentinel to see the replica",
        )

    def _start(self, name: str, port: int, args: list[str]) -> None:
        self.procs[name] = subprocess.Popen(
            [redis_binary(), "--port", str(port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no", "--dir", str(self.folder)]
            + args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(lambda: self.server(port).ping(), what=f"redis {name} to start")

    @property
    def url(self) -> str:
        """REDIS_URL of the group: the Sentinel, the service name, database 0."""
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{SERVICE}/0"

    @staticmethod
    def server(port: int) -> redis.Redis:
        """A client of one server, bypassing the Sentinel."""
        return redis.Redis(port=port, decode_responses=True, socket_timeout=5)

    def master_port_now(self) -> int:
        """The master's port as the Sentinel names it now."""
        _host, port = self.sentinel.sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    def kill_master(self) -> None:
        """Wait until the replica has every write, then SIGKILL the master and wait
        until the Sentinel has promoted the replica."""
        assert self.server(self.master_port).wait(1, 5000) == 1
        self.procs["master"].kill()
        self.procs["master"].wait(timeout=10)
        # What a client asks (redis-py's discover_master): the Sentinel names the
        # replica, and has seen it report the master role with no down flag.
        manager = redis.sentinel.Sentinel([("127.0.0.1", self.sentinel_port)])
        wait_for(
            lambda: manager.discover_master(SERVICE)[1] == self.replica_port,
            what="the Sentinel to promote the replica",
        )
        wait_for(
            lambda: (
                self.server(self.replica_port).info("replication")["role"] == "master"
            ),
            what="the replica to take the master role",
        )

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

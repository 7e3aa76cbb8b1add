"""A Redis Cluster of the test session: 3 masters and 3 replicas, each a real
redis-server on a free loopback port, joined with ``redis-cli --cluster create``.

Its files live under the checkout's ``.var/test/cluster-<pid>/`` (one folder per
session); it never touches the dev services (``make run``) or a system Redis, and
:meth:`RedisClusterGroup.stop` kills only the processes it started. A master killed
by :meth:`RedisClusterGroup.kill_master` is replaced by its replica after
NODE_TIMEOUT_MS without an answer (the replica's election adds well under a second).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.conftest import _die_with_parent
from tests.faults import redis_binary
from tests.redis_sentinel import wait_for

MASTERS = 3
REPLICAS_PER_MASTER = 1
# How long a master may be silent before the cluster calls it failed, ms (Redis's
# default is 15,000; small so the failover drill stays short, not so small that a
# loaded 2-core machine flaps).
NODE_TIMEOUT_MS = 2000
ROOT = Path(__file__).resolve().parent.parent


def redis_cli_binary() -> str | None:
    """The redis-cli next to the redis-server the tests use, or on PATH."""
    server = Path(redis_binary())
    beside = server.with_name("redis-cli")
    if beside.exists():
        return str(beside)
    return shutil.which("redis-cli")


def cluster_unavailable() -> str:
    """Why no cluster can be started here ("" when one can): the cluster tests skip
    with this reason."""
    try:
        server = redis_binary()
    except ImportError:
        return "no redis-server binary (install Debian's redis-server)"
    if not Path(server).exists():
        return f"no redis-server at {server}"
    if redis_cli_binary() is None:
        return "no redis-cli (install Debian's redis-tools) to create a cluster"
    return ""


def _free_ports(count: int) -> list[int]:
    """``count`` free loopback ports whose cluster bus ports (port + 10000) are free
    too; held open together so no two are the same."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            held.append(s)
            if port + 10000 > 65535:
                continue
            with socket.socket() as bus:
                try:
                    bus.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            ports.append(port)
    finally:
        for s in held:
            s.close()
    return ports


def cluster_info(client: redis.Redis) -> dict[str, str]:
    """``CLUSTER INFO`` of one node as a dict of strings."""
    reply = client.execute_command("CLUSTER INFO")
    if isinstance(reply, dict):
        return {k: str(v) for k, v in reply.items()}
    return dict(line.split(":", 1) for line in str(reply).splitlines() if ":" in line)


@dataclass
class Node:
    port: int
    proc: subprocess.Popen[bytes]

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=5)


class RedisClusterGroup:
    """Six redis-servers in cluster mode; :attr:`url` is the product's REDIS_URL."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.nodes: dict[int, Node] = {}
        ports = _free_ports(MASTERS * (1 + REPLICAS_PER_MASTER))
        try:
            for port in ports:
                self._start(port)
            cli = redis_cli_binary()
            assert cli is not None
            subprocess.run(
                [cli, "--cluster", "create"]
                + [f"127.0.0.1:{p}" for p in ports]
                + ["--cluster-replicas", str(REPLICAS_PER_MASTER), "--cluster-yes"],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=60,
            )
            self.wait_ok()
        except BaseException:
            self.stop()
            raise

    def _start(self, port: int) -> None:
        folder = self.folder / str(port)
        folder.mkdir(exist_ok=True)
        proc = subprocess.Popen(
            [redis_binary(), "--port", str(port), "--bind", "127.0.0.1"]
            + ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            + ["--cluster-node-timeout", str(NODE_TIMEOUT_MS)]
            # the other masters serve on while one is down (deploy/redis-cluster.md)
            + ["--cluster-require-full-coverage", "no"]
            + ["--save", "", "--appendonly", "no", "--dir", str(folder)]
            + ["--repl-diskless-sync-delay", "0", "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,  # a killed test session leaves no node
        )
        self.nodes[port] = Node(port=port, proc=proc)
        wait_for(lambda: self.nodes[port].client().ping(), what=f"redis {port}")

    @property
    def url(self) -> str:
        """REDIS_URL of the cluster: every node as a start-up node."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.nodes)
        return f"redis+cluster://{hosts}"

    def live_nodes(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.proc.poll() is None]

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        """Wait until every live node says ``cluster_state:ok`` and agrees on the
        masters (each master with a replica or not, all 16,384 slots served)."""

        def ok() -> bool:
            for node in self.live_nodes():
                info = cluster_info(node.client())
                if info["cluster_state"] != "ok":
                    return False
                if int(info["cluster_slots_ok"]) != 16384:
                    return False
            return True

        wait_for(ok, what="cluster_state:ok on every node", timeout_s=timeout_s)

    def masters(self) -> list[int]:
        """Ports of the live masters (as the live nodes see them)."""
        return sorted(
            n.port
            for n in self.live_nodes()
            if n.client().info("replication")["role"] == "master"
        )

    def master_of(self, key: str) -> int:
        """The port of the master that serves ``key``'s slot now."""
        node = self.live_nodes()[0].client()
        slot = int(node.execute_command("CLUSTER KEYSLOT", key))
        for start, end, master, *_replicas in node.execute_command("CLUSTER SLOTS"):
            if start <= slot <= end:
                return int(master[1])
        raise AssertionError(f"no master serves slot {slot}")

    def replica_of(self, master_port: int) -> int:
        """The port of a replica of the master at ``master_port``."""
        for node in self.live_nodes():
            info = node.client().info("replication")
            if info["role"] == "slave" and int(info["master_port"]) == master_port:
                return node.port
        raise AssertionError(f"no replica of {master_port}")

    def kill_master(self, port: int) -> int:
        """Wait until its replica has every write, SIGKILL the master at ``port``,
        and wait until the replica is promoted and the cluster is ok again; return
        the promoted replica's port."""
        replica = self.replica_of(port)
        assert self.nodes[port].client().wait(1, 5000) == 1
        self.nodes[port].proc.kill()
        self.nodes[port].proc.wait(timeout=10)
        wait_for(
            lambda: (
                self.nodes[replica].client().info("replication")["role"] == "master"
            ),
            what="the replica to take over",
            timeout_s=30,
        )
        self.wait_ok()
        return replica

    def restore(self) -> None:
        """Start again every node that was killed (each rejoins from its
        ``nodes.conf``, as a replica of the master that replaced it) and wait until
        every node sees all six with no failure flag."""
        dead = [n.port for n in self.nodes.values() if n.proc.poll() is not None]
        if not dead:
            return
        for port in dead:
            self._start(port)

        def whole() -> bool:
            for node in self.live_nodes():
                lines = node.client().execute_command("CLUSTER NODES")
                if isinstance(lines, dict):
                    flags = [v["flags"] for v in lines.values()]
                else:
                    flags = [line.split()[2] for line in lines.splitlines()]
                if len(flags) != len(self.nodes) or any("fail" in f for f in flags):
                    return False
            return True

        wait_for(whole, what="the restarted nodes to rejoin", timeout_s=30)
        self.wait_ok()

    def flush(self) -> None:
        """Empty every master (their replicas follow)."""
        for port in self.masters():
            self.nodes[port].client().flushall()

    def stop(self) -> None:
        """Kill the servers this group started and remove their files."""
        for node in self.nodes.values():
            if node.proc.poll() is None:
                node.proc.kill()
        for node in self.nodes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)


def cluster_folder(pid: int) -> Path:
    """The session's folder under the checkout's ``.var/test/`` (folders of sessions
    that are gone, killed before their teardown, are removed)."""
    base = ROOT / ".var" / "test"
    for old in base.glob("cluster-*"):
        other = old.name.removeprefix("cluster-")
        if other.isdigit() and not Path(f"/proc/{other}").exists():
            shutil.rmtree(old, ignore_errors=True)
    return base / f"cluster-{pid}"


def started(folder: Path, *, attempts: int = 2) -> RedisClusterGroup:
    """Start a cluster in ``folder`` (a port taken meanwhile by another process: once
    more on fresh ports)."""
    for attempt in range(attempts):
        try:
            return RedisClusterGroup(folder)
        except (subprocess.CalledProcessError, AssertionError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")

"""Redis Cluster: ``REDIS_URL`` may name a cluster by some of its nodes.

::

    redis+cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...][?OPTION=VALUE&...]

The hosts are start-up nodes (any masters or replicas of the cluster; two or three are
enough, the client learns the rest from ``CLUSTER SLOTS``); a cluster has no database
number, so a path is refused. Options: ``read_from_replicas`` (``0``/``1``, default 0:
every command goes to the master of its key's slot), ``ssl`` (``1`` for TLS). The
scheme is the one redis-py's own cluster URLs use in other tools (``redis+cluster``).

Every client of the product follows the cluster through a failover: a command that
fails on a dead master makes redis-py refresh the slot map (``CLUSTER SLOTS``) and
send it to the promoted replica. Built here for inference/connections.py (sync and
async :class:`~redis.cluster.RedisCluster`), Django's cache (:class:`ClusterCache`,
also django-ratelimit's store) and Celery's broker (chatsite/kombu_cluster.py).

This module reads no settings: the settings modules import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

import redis
import redis.asyncio.cluster as aiocluster
import redis.cluster
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from redis._parsers import CommandsParser

SCHEME = "redis+cluster"
DEFAULT_PORT = 6379
_FLAGS = ("read_from_replicas", "ssl")


@dataclass(frozen=True)
class ClusterUrl:
    """A parsed ``redis+cluster://`` URL."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    read_from_replicas: bool = False
    ssl: bool = False

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of a cluster client: credentials and options."""
        kwargs: dict[str, Any] = {}
        if self.username:
            kwargs["username"] = self.username
        if self.password:
            kwargs["password"] = self.password
        if self.read_from_replicas:
            kwargs["read_from_replicas"] = True
        if self.ssl:
            kwargs["ssl"] = True
        return kwargs


def _host_port(text: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` too); the port defaults to 6379."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if not host:
        raise ValueError(f"a cluster node address has no host: {text!r}")
    return host, int(port) if port else DEFAULT_PORT


def cluster_url_parse(url: str) -> ClusterUrl | None:
    """Parse a ``redis+cluster://`` URL; return None for any other URL.

    Raises ValueError when the URL has the cluster scheme but no node, a database
    path (a cluster has database 0 only) or an unknown option.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != SCHEME:
        return None
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    if path.strip("/") not in ("", "0"):
        raise ValueError(f"{SCHEME}:// URL with a database: a cluster has only 0")
    userinfo, _, hosts = netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    nodes = tuple(_host_port(h) for h in hosts.split(",") if h)
    if not nodes:
        raise ValueError(f"{SCHEME}:// URL without a node address: {url!r}")
    options = {k: v[-1] for k, v in parse_qs(query).items()}
    unknown = set(options) - set(_FLAGS)
    if unknown:
        raise ValueError(f"{SCHEME}:// URL option(s) not known: {sorted(unknown)}")
    return ClusterUrl(
        nodes=nodes,
        username=unquote(username) or None,
        password=unquote(password) or None,
        read_from_replicas=options.get("read_from_replicas", "0") in ("1", "true"),
        ssl=options.get("ssl", "0") in ("1", "true"),
    )


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster."""
    return url.partition("://")[0].lower() == SCHEME


class ClusterPipeline(redis.cluster.ClusterPipeline):
    """redis-py's sync cluster pipeline with ``eval``/``evalsha`` queued as any other
    command (redis-py leaves them unimplemented in a cluster pipeline): each is sent to
    the master of its first key's slot, which all its keys share (the key convention,
    inference/keys/)."""

    def eval(self, script: str, numkeys: int, *keys_and_args: Any) -> Any:  # type: ignore[override]
        return self.execute_command("EVAL", script, numkeys, *keys_and_args)

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)


class RedisCluster(redis.cluster.RedisCluster):
    """redis-py's sync cluster client whose pipelines take scripts
    (:class:`ClusterPipeline`)."""

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
        pipe.__class__ = ClusterPipeline  # adds methods only, no state
        return pipe


class ScriptKeysParser(CommandsParser):
    """redis-py's command-key parser (its command table reused) that reads the keys
    of EVAL and EVALSHA from their ``numkeys`` argument.

    redis-py's sync cluster pipeline (8.1.0) asks the client's default node for the
    keys of each queued script (``COMMAND GETKEYS``: EVAL's keys are "movable"): a
    round trip each, and once that node died in a failover, a ConnectionError at every
    such pipeline after, for good (that path never replaces the default node). A
    settlement's stream read (inference/events_read.py) then failed at each retry and
    the answer stayed ``streaming`` (tests/cluster/test_cluster_failover.py). Single
    commands already read a script's keys so (``RedisCluster.determine_slot``).
    """

    def __init__(self, parser: CommandsParser) -> None:
        self.commands = parser.commands
        self.redis_connection = parser.redis_connection

    def get_keys(self, redis_conn: Any, *args: Any) -> Any:
        if len(args) > 3 and str(args[0]).upper() in ("EVAL", "EVALSHA"):
            keys = list(args[3 : 3 + int(args[2])])
            if keys:
                return keys
        return super().get_keys(redis_conn, *args)


def cluster_client_sync(parsed: ClusterUrl, **kwargs: Any) -> RedisCluster:
    """Return a sync cluster client; ``kwargs`` go to each node's connections (e.g.
    ``decode_responses``, ``max_connections`` per node, ``retry``). Its pipelines
    route scripts by their keys alone (:class:`ScriptKeysParser`)."""
    client = RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in parsed.nodes],
        **parsed.client_kwargs(),
        **kwargs,
    )
    client.commands_parser = ScriptKeysParser(client.commands_parser)
    return client


def cluster_client_async(parsed: ClusterUrl, **kwargs: Any) -> aiocluster.RedisCluster:
    """Return an asyncio cluster client (bound to the event loop that first uses it);
    ``kwargs`` as in :func:`cluster_client_sync`."""
    return aiocluster.RedisCluster(
        startup_nodes=[aiocluster.ClusterNode(h, p) for h, p in parsed.nodes],
        **parsed.client_kwargs(),
        **kwargs,
    )


class ClusterCacheClient(RedisCacheClient):
    """Django's Redis cache client on one process-wide cluster client.

    The multi-key operations split by slot (``MGET`` and ``MSET`` of keys of many
    slots are refused by a cluster: redis-py's ``*_nonatomic`` forms send one per
    slot); ``clear`` empties every master.
    """

    def __init__(self, servers: list[str], **options: Any) -> None:
        super().__init__(servers, **options)
        parsed = cluster_url_parse(servers[0])
        if parsed is None:
            raise ValueError(f"not a {SCHEME}:// URL: {servers[0]!r}")
        pool_options = self._pool_options  # type: ignore[attr-defined]
        kwargs = {k: v for k, v in pool_options.items() if k != "parser_class"}
        self._cluster = cluster_client_sync(parsed, **kwargs)

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        return self._cluster

    def get_many(self, keys: Iterable[Any]) -> dict[Any, Any]:
        keys = list(keys)
        values = self._cluster.mget_nonatomic(keys)
        loads = self._serializer.loads  # type: ignore[attr-defined]
        return {k: loads(v) for k, v in zip(keys, values, strict=True) if v is not None}

    def set_many(self, data: Mapping[Any, Any], timeout: Any) -> None:
        dumps = self._serializer.dumps  # type: ignore[attr-defined]
        pipeline = self._cluster.pipeline()
        for key, value in data.items():
            if timeout is None:
                pipeline.set(key, dumps(value))
            else:
                pipeline.set(key, dumps(value), ex=timeout)
        pipeline.execute()

    def clear(self) -> bool:
        return bool(self._cluster.flushdb(target_nodes=self._cluster.PRIMARIES))


class ClusterCache(RedisCache):
    """``BACKEND`` of Django's cache on a ``redis+cluster://`` LOCATION."""

    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = ClusterCacheClient


def cluster_cache_config(url: str, *, key_prefix: str) -> dict[str, Any]:
    """Return the ``CACHES`` entry of a cluster URL (LOCATION a list: a string would
    be split at the commas between the nodes)."""
    return {
        "BACKEND": "chatsite.redis_cluster.ClusterCache",
        "LOCATION": [url],
        "KEY_PREFIX": key_prefix,
    }

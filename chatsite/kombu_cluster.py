"""Celery's broker on a Redis Cluster: kombu's Redis transport on the master of one
slot.

kombu has no Redis Cluster transport (celery/kombu#526 is open; the transport of
kombu#2204 is not merged). Its Redis transport sends multi-key commands (``BRPOP``
over every queue, ``MULTI`` blocks over a queue and its unacked hash), which a
cluster refuses across slots. So every key kombu writes carries one hash tag
(``global_keyprefix`` = :data:`KEY_PREFIX`, kombu's own option): all of them live in
one slot, on one master, and this transport connects to that master, as a plain
Redis. When the connection fails (the master died), Celery reconnects and the new
channel asks the cluster again which master serves the slot: the promoted replica.
What kombu holds is little (the queued background jobs and their unacked copies),
so one master carries it at any scale of the product.

The settings (chatsite/settings/base.py) turn a ``redis+cluster://`` URL into this
transport's ``rediscluster://`` URL and the nodes in the ``cluster_nodes`` transport
option; :func:`register` (called by chatsite/celery.py) names the transport.
"""

from __future__ import annotations

from typing import Any, cast

import kombu.transport
from kombu.transport import redis as kombu_redis

from chatsite.redis_cluster import ClusterUrl, cluster_client_sync, cluster_url_parse

ALIAS = "rediscluster"
# The hash tag of every key of the broker.
KEY_PREFIX = "{celery}:"


def slot_owner(parsed: ClusterUrl) -> tuple[str, int]:
    """Return ``(host, port)`` of the master that serves :data:`KEY_PREFIX`'s slot now
    (asked of the cluster through its start-up nodes)."""
    client = cluster_client_sync(parsed, socket_connect_timeout=5, socket_timeout=5)
    try:
        node = client.get_node_from_key(KEY_PREFIX)
        return node.host, int(node.port)
    finally:
        client.close()


class Channel(kombu_redis.Channel):
    """kombu's Redis channel on the master of the broker's slot."""

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        params: dict[str, Any] = super()._connparams(asynchronous)  # type: ignore[misc]
        options = cast(Any, self.connection).client.transport_options
        parsed = cluster_url_parse(options["cluster_url"])
        assert parsed is not None, "cluster_url must be a redis+cluster:// URL"
        params["host"], params["port"] = slot_owner(parsed)
        params["db"] = 0  # a cluster has database 0 only
        return params


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel
    driver_name = "redis-cluster"


def broker(url: str) -> tuple[str, dict[str, Any]]:
    """Return Celery's ``(broker_url, broker_transport_options)`` for a cluster
    ``url`` (chatsite/redis_cluster.py)."""
    parsed = cluster_url_parse(url)
    if parsed is None:
        raise ValueError(f"not a cluster URL: {url!r}")
    host, port = parsed.nodes[0]
    return f"{ALIAS}://{host}:{port}/0", {
        "cluster_url": url,
        "global_keyprefix": KEY_PREFIX,
    }


def register() -> None:
    """Name :class:`Transport` ``rediscluster`` for kombu (idempotent)."""
    kombu.transport.TRANSPORT_ALIASES[ALIAS] = "chatsite.kombu_cluster:Transport"

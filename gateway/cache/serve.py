"""Serve a cached answer as a generation stream, so the relay and finalisation that
follow a worker's stream handle it unchanged."""

from __future__ import annotations

import re
import time
from dataclasses import asdict

from django.conf import settings

from gateway.cache.policy import CacheHit
from inference import client as inference_client
from inference import keys, protocol
from inference.connections import redis_sync

CACHE_WORKER = "cache"  # the ``worker`` of a cached answer's meta event

_WORD_RE = re.compile(r"\s*\S+|\s+$")


def answer_chunks(text: str, *, size: int) -> list[str]:
    """Split ``text`` into pieces of at most ``size`` characters, at word ends if possible.

    Joined, the pieces are ``text`` exactly; pieces are whole Unicode code points.
    """
    size = max(1, size)
    pieces: list[str] = []
    current = ""
    for word in _WORD_RE.findall(text):
        while len(word) > size:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(word[:size])
            word = word[size:]
        if len(current) + len(word) > size:
            pieces.append(current)
            current = ""
        current += word
    if current:
        pieces.append(current)
    return pieces


def cache_serve(
    *, job_id: str, hit: CacheHit, enqueued_at: float | None = None
) -> None:
    """Write a cached answer as ``job_id``'s generation stream; nothing is enqueued.

    Events, as a worker writes them: ``meta`` (``worker`` "cache", ``queue_ms`` 0,
    ``cache`` = the hit's kind), the text as ``token`` events of at most
    GATEWAY_CACHE_CHUNK_CHARS characters, then ``done`` with the cached finish reason
    and the usage of the generation that wrote the answer, its whole prompt as
    ``cached_tokens`` (what the client is told; a hit bills nothing: see
    :mod:`gateway.cache`). ``ttft_ms`` and
    ``latency_ms`` are the milliseconds since ``enqueued_at`` (epoch s; None: 0).
    """
    client = redis_sync()
    key = keys.gen_key(job_id)
    meta = {
        "model": hit.model,
        "worker": CACHE_WORKER,
        "queue_ms": 0,
        "cache": hit.kind,
    }
    with client.pipeline(transaction=True) as pipe:
        pipe.xadd(key, protocol.event_fields(protocol.EVENT_META, meta))
        for piece in answer_chunks(hit.text, size=settings.GATEWAY_CACHE_CHUNK_CHARS):
            pipe.xadd(key, protocol.token_fields(piece))
        pipe.execute()
    elapsed_ms = int(max(0.0, time.time() - enqueued_at) * 1000) if enqueued_at else 0
    inference_client.terminal_append(
        client,
        job_id=job_id,
        event_type=protocol.EVENT_DONE,
        payload={
            "finish_reason": hit.finish_reason,
            "usage": asdict(
                protocol.Usage(
                    prompt_tokens=hit.prompt_tokens,
                    completion_tokens=hit.completion_tokens,
                    cached_tokens=hit.prompt_tokens,
                )
            ),
            "ttft_ms": elapsed_ms,
            "latency_ms": elapsed_ms,
        },
        ttl_s=settings.INFERENCE_STREAM_TTL_S,
    )

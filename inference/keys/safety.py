"""The safety app's Redis keys (owner :mod:`safety`). Part of :mod:`inference.keys`.

``safety:verdict:<backend>:<sha256>`` (string, JSON verdict) and
``safety:vector:<sha256>`` (string, an embedding): caches read with
:func:`inference.keys.mget_all`.
"""

from __future__ import annotations


def verdict_key(backend: str, digest: str) -> str:
    """Return a cached moderation verdict (``digest``: SHA-256 hex of the text)."""
    return f"safety:verdict:{backend}:{digest}"


def vector_key(digest: str) -> str:
    """Return a cached moderation embedding (``digest``: SHA-256 hex of the text)."""
    return f"safety:vector:{digest}"

"""The wire format of embedding vectors in an ``embedding`` event (inference/protocol.py):
base64 of little-endian float32 values, row-major, one row per input text."""

from __future__ import annotations

import base64
import struct
from typing import Any


def vectors_encode(rows: Any) -> str:
    """Encode vectors (a sequence of equal-length float sequences, or a 2-d float32
    numpy array) as base64 of little-endian float32 values, row-major."""
    tobytes = getattr(rows, "astype", None)
    if tobytes is not None:  # numpy: one copy, no per-value work
        return base64.b64encode(rows.astype("<f4", copy=False).tobytes()).decode()
    flat = [float(v) for row in rows for v in row]
    return base64.b64encode(struct.pack(f"<{len(flat)}f", *flat)).decode()


def vectors_decode(data: str, *, count: int, dim: int) -> list[list[float]]:
    """Decode :func:`vectors_encode`'s output into ``count`` lists of ``dim`` floats.

    Raises ``ValueError`` when the payload does not hold exactly count x dim values.
    """
    raw = base64.b64decode(data)
    if len(raw) != 4 * count * dim:
        raise ValueError(
            f"embedding payload holds {len(raw) // 4} values, expected {count}x{dim}"
        )
    flat = struct.unpack(f"<{count * dim}f", raw)
    return [list(flat[i * dim : (i + 1) * dim]) for i in range(count)]

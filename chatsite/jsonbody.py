"""Parse JSON from a client with a cap on nesting depth.

Python's JSON decoder recurses once per level: ``[[[[…`` 100,000 deep is a
RecursionError, and a value a few hundred levels deep makes any code that walks it
recursively (validators, renderers) costly or fail. :func:`json_loads_bounded` refuses
both as a 400 before any of our code sees the value. The depth is found without
walking the value in Python: the text's strings are removed (one regular-expression
pass; the text already parsed, so every string is well formed) and the running sum
of the brackets left is taken (numpy), linear in the text; a text with fewer opening
brackets than the cap (most bodies) skips even that.
"""

from __future__ import annotations

import json
import re
from typing import Any

from chatsite.errors import InvalidInput

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Outside its strings, JSON text is ASCII: keep only the brackets, as +1 / -1.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SIGNS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")


def json_depth(text: str) -> int:
    """Return how deep the valid JSON ``text`` nests arrays and objects (a scalar is
    0, ``[]`` 1): the largest running sum of its brackets, strings left out."""
    import numpy as np

    skeleton = _STRING.sub("", text).encode("ascii", "ignore")
    signs = skeleton.translate(_SIGNS, _NOT_BRACKETS)
    if not signs:
        return 0
    steps = np.frombuffer(signs, dtype=np.int8).astype(np.int32)
    return int(np.cumsum(steps).max())


def _brackets_open(text: str) -> int:
    """The ``[`` and ``{`` of ``text``, strings included: a bound on its depth that
    costs no pass in Python (a body with fewer needs no :func:`json_depth`)."""
    return text.count("[") + text.count("{")


def json_loads_bounded(
    data: bytes | str, *, max_depth: int, message: str = "The request body"
) -> Any:
    """Return the value of the JSON ``data`` (UTF-8 bytes, a BOM allowed, or str).

    Raises InvalidInput ``invalid_json`` when it is not JSON, and ``json_too_deep``
    when it nests more than ``max_depth`` levels (settings.JSON_MAX_DEPTH for request
    bodies); ``message`` names the input in the error ("The request body", "This
    file").
    """
    try:
        text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
        value = json.loads(text)
    except RecursionError:
        value, text = None, None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"{message} is not valid JSON.", code="invalid_json"
        ) from exc
    if text is None or (
        _brackets_open(text) > max_depth and json_depth(text) > max_depth
    ):
        raise InvalidInput(
            f"{message} nests arrays or objects more than {max_depth} levels deep; "
            f"the limit is {max_depth}.",
            code="json_too_deep",
        )
    return value

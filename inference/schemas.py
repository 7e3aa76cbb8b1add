"""Check a JSON payload against a schema: the one validator of every wire format.

A schema maps field names to a type, a predicate or a nested schema
(:func:`schema_validate`); :class:`Optional` marks a field that may be absent. The
worker events' schemas live in :mod:`inference.protocol`, the browser's SSE events and
the OpenAI objects' in ``conversations``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Optional:
    """Marks a schema field that may be absent; when present it must pass ``check``."""

    check: Any


def optional_int(value: Any) -> bool:
    """True for an ``int`` or None: a schema predicate."""
    return value is None or isinstance(value, int)


def schema_validate(what: str, schema: dict[str, Any], payload: Any) -> None:
    """Check ``payload`` (a dict) against ``schema`` (field name -> type or predicate).

    Every field is required except those marked :class:`Optional` (absent is fine,
    present must be valid); a nested dict schema checks a nested object. ``bool`` is
    not an ``int`` here. Raises ``ValueError`` naming ``what`` and the first missing,
    extra or ill-typed field. Used for every payload that crosses a process or network
    boundary: worker events here, browser SSE and OpenAI objects in ``conversations``.
    """
    if not isinstance(payload, dict):
        raise ValueError(f"{what}: expected an object, got {payload!r}")
    extra = set(payload) - set(schema)
    if extra:
        raise ValueError(f"{what}: unexpected fields {sorted(extra)}")
    for name, check in schema.items():
        if isinstance(check, Optional):
            if name not in payload:
                continue
            check = check.check
        elif name not in payload:
            raise ValueError(f"{what}: missing field {name!r}")
        value = payload[name]
        if isinstance(check, dict):
            schema_validate(f"{what}.{name}", check, value)
            continue
        ok = isinstance(value, check) if isinstance(check, type) else check(value)
        if not ok or (check is int and isinstance(value, bool)):
            raise ValueError(f"{what}: bad value for {name!r}: {value!r}")

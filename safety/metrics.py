"""Prometheus metrics of moderation (DESIGN §11), multiprocess-safe like
:mod:`inference.metrics` (the web process serves every process's samples at
``/metrics``).

- ``safety:output_moderation_total{action, category}``: answers whose output
  moderation acted, counted once per answer when it is settled: ``action`` is ``cut``
  (a ``block`` policy matched, or the backend was down and SAFETY_FAIL_CLOSED is set:
  category ``unavailable``) or ``flag`` (a ``flag`` policy matched, the answer went on).
"""

from __future__ import annotations

from prometheus_client import Counter

OUTPUT_MODERATION = Counter(
    "safety:output_moderation",
    "Answers cut or flagged by output moderation, by category.",
    ("action", "category"),
)

"""Evaluation of models through the gateway (DESIGN §11).

- :mod:`.models`: EvalSet, EvalCase, EvalRun, EvalResult (gateway app tables);
- :mod:`.checks`: the checks a case's output is held to (pure functions);
- :mod:`.services`: sets (JSONL import), runs (create, execute case by case through
  the gateway's one generation lifecycle, bounded and shed before users);
- :mod:`.selectors`: a run's summary (pass rate with a Wilson interval, latency
  percentiles, tokens, cost) and the A/B comparison of two runs;
- ``sets/basic.jsonl``: the set shipped with the product.
"""

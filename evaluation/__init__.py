"""Evaluation of models through the gateway (DESIGN §11).

- :mod:`.models`: EvalSet, EvalCase, EvalRun, EvalResult (tables named ``gateway_eval*``);
- :mod:`.checks`: the checks a case's output is held to (pure functions);
- :mod:`.importing`: sets (JSONL import, all or nothing);
- :mod:`.runs`: runs created (set and pool checked) and the service user they run as;
- :mod:`.services`: runs executed case by case through the gateway's one generation
  lifecycle, bounded and shed before users;
- :mod:`.tasks`: the Celery task that executes a run;
- :mod:`.selectors`: a run's summary (pass rate with a Wilson interval, latency
  percentiles, tokens, cost) and the A/B comparison of two runs;
- ``sets/basic.jsonl``: the set shipped with the product.
"""

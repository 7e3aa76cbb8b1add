"""Settings of evaluation runs (evaluation/, DESIGN §11), kept apart from base.py,
which star-imports them.

Eval requests go through the gateway as the service user EVAL_USERNAME on the plan
EVAL_PLAN_NAME, at most EVAL_CONCURRENCY at once per run, and are shed before any user:
admitted only below EVAL_SHED_FRACTION of a pool's queue_threshold. A shed request is
retried with exponential backoff (EVAL_RETRY_BASE_S doubling up to 30 s) for up to
EVAL_RETRY_MAX_S seconds before its case is recorded as an error.
"""

from chatsite.settings.environment import env

EVAL_PLAN_NAME = env("EVAL_PLAN_NAME", default="eval")
EVAL_USERNAME = env("EVAL_USERNAME", default="eval-bot")
EVAL_CONCURRENCY = env.int("EVAL_CONCURRENCY", default=2)
EVAL_SHED_FRACTION = env.float("EVAL_SHED_FRACTION", default=0.25)
EVAL_RETRY_BASE_S = env.float("EVAL_RETRY_BASE_S", default=1.0)
EVAL_RETRY_MAX_S = env.float("EVAL_RETRY_MAX_S", default=600.0)
# max_tokens of a case that sets none (tokens).
EVAL_MAX_TOKENS = env.int("EVAL_MAX_TOKENS", default=256)

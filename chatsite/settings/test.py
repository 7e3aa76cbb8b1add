"""Test settings: a real PostgreSQL and Redis of the tests' own (``.var/test/``), a
private Redis database."""

import os
from pathlib import Path

# Each test session gets its own Prometheus multiprocess folder (worker processes that
# the tests start inherit it through the environment); set before base exports it.
os.environ.setdefault(
    "PROMETHEUS_MULTIPROC_DIR",
    str(
        Path(__file__).resolve().parents[2] / ".var" / f"prometheus-test-{os.getpid()}"
    ),
)

# The tests' own PostgreSQL and Redis (.var/test/, scripts/services.py's "test"
# profile), never those of a running `make run`; processes the tests start inherit it.
# Started here when missing, so a plain `pytest` works as `make test` does.
os.environ.setdefault("CHATSITE_SERVICES", "test")
_ROOT = Path(__file__).resolve().parents[2]
if (
    os.environ["CHATSITE_SERVICES"] == "test"
    and not (_ROOT / ".var" / "test" / "services.env").exists()
    and not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"))
):
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, str(_ROOT / "scripts" / "services.py"), "up"], check=True
    )

from chatsite.sentinel import (  # noqa: E402
    redis_caches,
    sentinel_celery_broker,
)
from chatsite.settings.base import *  # noqa: E402, F403
from chatsite.settings.base import REDIS_URL, env  # noqa: E402

# Tests own Redis database 15 of the same server and flush it between tests.
REDIS_URL = env("TEST_REDIS_URL", default=REDIS_URL.rsplit("/", 1)[0] + "/15")
CACHES = redis_caches(REDIS_URL)
CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = sentinel_celery_broker(REDIS_URL)
CELERY_TASK_ALWAYS_EAGER = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
SSE_HEARTBEAT_S = 1.0
# The test database is made after the settings load; web processes of the tests' stack
# (tests/stack.py) start without a warm-up thread.
WEB_WARM_SERVICES = env.bool("WEB_WARM_SERVICES", default=False)
INFERENCE_NO_WORKER_GRACE_S = 2.0
# Tests edit pools and plans between requests: no per-process config cache.
GATEWAY_CONFIG_CACHE_S = 0.0
# nor API key lookups (tests of the cache turn it on)
GATEWAY_API_KEY_CACHE_S = 0.0
SAFETY_CONFIG_CACHE_S = 0.0
# Tasks run eagerly here: tests trigger titles/summaries/facts explicitly, so a test
# sees only the model calls it asked for.
CHAT_BACKGROUND_JOBS = False
# The chat offers no tools in tests unless a test (or a test server's environment) names
# a provider: a turn's prompt, caches and queries stay those of a turn without tools.
CHAT_TOOLS_PROVIDER = env("CHAT_TOOLS_PROVIDER", default="")
# Input moderation is on in the product (base.py) but off in tests unless a test asks
# for it (the `moderation_on` fixture, or SAFETY_INPUT_ENABLED=1 in a test server's
# environment): a test about something else must not depend on the classifier's
# verdicts on its texts.
SAFETY_INPUT_ENABLED = env.bool("SAFETY_INPUT_ENABLED", default=False)
# Output moderation too (on in the product, "hold"): off in tests unless a test asks
# for it (the fixtures of tests/safety/test_output.py and
# tests/gateway/test_generations_moderation.py, or SAFETY_OUTPUT_ENABLED=1 in the
# environment): hold releases an answer window by window, and a test of streaming,
# resuming or billing must not depend on the classifier's verdicts on its script.
SAFETY_OUTPUT_ENABLED = env.bool("SAFETY_OUTPUT_ENABLED", default=False)

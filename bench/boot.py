"""Start-up shared by the benchmark scripts: the repository root and the settings.

A script under ``bench/`` runs as a file (``.venv/bin/python bench/<name>.py``), so it
first puts the repository root on ``sys.path`` itself, then imports this module::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

    from bench.boot import ROOT  # noqa: E402

Importing it gives the processes the dev settings (``chatsite.settings.dev``: the
services of ``scripts/services.py``) and no model downloads (``HF_HUB_OFFLINE``: the
models are the ones already on disk), unless the environment says otherwise.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def django_start(environ: dict[str, str] | None = None) -> None:
    """Set ``environ`` in this process's environment, then load Django.

    The settings read the environment once, when Django loads them, so every variable
    a benchmark changes (pools, rates, moderation) must be set before this call; the
    processes it starts later inherit them.
    """
    import django

    os.environ.update(environ or {})
    django.setup()


def option_parser(
    description: str | None = None, **defaults: Any
) -> argparse.ArgumentParser:
    """Return a parser with one option per keyword of ``defaults``.

    ``max_tokens=128`` becomes ``--max-tokens`` (default 128). The option takes its
    default's type: int, float or str; a list takes one or more values of its first
    item's type (``nargs="+"``); False makes a flag that sets it to True.
    ``description`` heads ``--help``. Options that need more (a help text, choices)
    are added to the parser as usual.
    """
    parser = argparse.ArgumentParser(description=description)
    for name, default in defaults.items():
        flag = "--" + name.replace("_", "-")
        if default is False:
            parser.add_argument(flag, action="store_true")
        elif isinstance(default, list):
            kind = type(default[0])
            parser.add_argument(flag, type=kind, nargs="+", default=default)
        else:
            parser.add_argument(flag, type=type(default), default=default)
    return parser

"""Run a Python script on uvloop's event loop: ``python bench/uvloop_main.py SCRIPT
ARGS...`` (``asyncio.run`` inside it then makes a uvloop loop). For
bench/gateway_overhead.py ``--worker-loop uvloop``: the inference worker on uvloop,
a lever to measure beside the product's default (the standard library's loop)."""

from __future__ import annotations

import asyncio
import runpy
import sys
from pathlib import Path

import uvloop


def main() -> None:
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    sys.argv = sys.argv[1:]
    # as ``python SCRIPT`` would: the script's folder first on the path
    sys.path[0] = str(Path(sys.argv[0]).resolve().parent)
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()

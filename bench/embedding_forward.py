"""The embedding engine's forward pass, ``SentenceTransformer.encode`` against the
direct path (:mod:`inference.engines.sbert_direct`), calls interleaved one by one.

    .venv/bin/python bench/embedding_forward.py [--reps 3] [--core 1]

One process, one torch thread, on ``--core`` (-1: unpinned), as a pinned embedding
worker runs. For each group of texts (the API-miss texts of
``bench/api_moderation_cost.py``, about 22 word pieces; ``hi``, 3 word pieces: the
fixed cost; 64 plain words) every text is embedded by each path in turn, ``--reps``
times, so a change of machine load hits both alike; prints each path's CPU p50
(``thread_time``, ms) per text and the load average. Needs no service.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.api_moderation_cost import _long_text, _text  # noqa: E402
from bench.boot import option_parser  # noqa: E402


def main() -> None:
    args = option_parser(__doc__.split("\n\n")[0], reps=3, core=1).parse_args()
    if args.core >= 0:
        os.sched_setaffinity(0, {args.core})
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from inference.engines.sbert import SentenceTransformersEngine

    torch.set_num_threads(1)
    engine = SentenceTransformersEngine(threads=1)
    asyncio.run(engine.start())
    direct = engine._direct  # noqa: SLF001  the engine's own two paths, compared
    paths = {"encode": None, "direct": direct}
    groups = {
        "API-miss texts (~22 word pieces)": [_text() for _ in range(30)],
        "'hi' (3 word pieces)": ["hi"] * 10,
        "64 words (~73 word pieces)": [_long_text(64) for _ in range(8)],
    }
    print(f"direct path: {engine.direct}; pinned to core {args.core}")
    for label, texts in groups.items():
        cpu: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.reps):
            for text in texts:
                for name, path in paths.items():
                    engine._direct = path  # noqa: SLF001
                    start = time.thread_time()
                    engine._run([[text]])  # noqa: SLF001
                    cpu[name].append((time.thread_time() - start) * 1e3)
        before = statistics.median(cpu["encode"])
        after = statistics.median(cpu["direct"])
        print(
            f"  {label:34s} encode {before:6.2f} ms  direct {after:6.2f} ms "
            f"({100 * (after / before - 1):+.0f} %)  CPU p50, n={len(cpu['encode'])}; "
            f"load average {os.getloadavg()[0]:.2f}"
        )
    engine._direct = direct  # noqa: SLF001


if __name__ == "__main__":
    main()

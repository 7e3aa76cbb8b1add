"""The load bench/capacity.py puts on the product: the bench user's sign-in and
turns over HTTP, the scripted worker's answers, and which cores run what.

The user, plan and pool are bench/sse_fanout.py's (``bench_setup``): no limits, one
pool served by the scripted engine.
"""

from __future__ import annotations

import asyncio
import os

PASSWORD = "ssebench-pass-123"

# The answers' text: sentences of 14 words (a word a token), so that output
# moderation's windows (a sentence each, safety/output.py) fall as in ordinary prose.
SENTENCE = "The relay sends this answer to the page a few words at a time."


def answer_text(tokens: int) -> str:
    """``tokens`` words of :data:`SENTENCE` repeated (the scripted engine emits a word
    a token)."""
    words = SENTENCE.split()
    return " ".join(words[i % len(words)] for i in range(tokens))


def worker_args(n: int, tokens: int, delay_ms: float) -> list[str]:
    """``run_inference_worker`` arguments: the bench pool, scripted, ``n`` jobs at
    once, answers of ``tokens`` tokens ``delay_ms`` ms apart."""
    from bench.sse_fanout import POOL

    return [
        "--pool", POOL, "--engine", "scripted", "--concurrency", str(max(1, n)),
        "--delay-ms", str(delay_ms), "--script-text", answer_text(tokens),
    ]  # fmt: skip


def pin(pid: int, cores: set[int]) -> None:
    """Run process ``pid`` (0: this one) on ``cores`` only (none: leave it)."""
    if cores:
        os.sched_setaffinity(pid, cores)


def cores_split() -> tuple[set[int], set[int]]:
    """(the web's cores, everyone else's): core 0 and the rest, where there are 2+."""
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        return set(), set()
    return {mine[0]}, set(mine[1:])


def login(base: str) -> dict[str, str]:
    """Sign the bench user in (a PBKDF2 run: kept out of every measured window);
    return the session's cookies."""
    import httpx

    from bench.chat import login as form_login

    with httpx.Client(base_url=base, timeout=60) as http:
        form_login(http, username="ssebench", password=PASSWORD)
        return dict(http.cookies.items())


async def turns_post(base: str, cookies: dict[str, str], n: int) -> list[str]:
    """POST ``n`` messages as the chat page does, 8 at a time; return stream paths."""
    import httpx

    gate = asyncio.Semaphore(8)
    headers = {"X-CSRFToken": cookies["csrftoken"]}
    async with httpx.AsyncClient(base_url=base, timeout=120, cookies=cookies) as http:

        async def one(i: int) -> str:
            async with gate:
                r = await http.post(
                    "/c/messages/", data={"content": f"Turn {i}."}, headers=headers
                )
                r.raise_for_status()
                return r.json()["assistant_message"]["stream_url"]

        return list(await asyncio.gather(*(one(i) for i in range(n))))

"""Conversation titles on the embedded model: how many first messages get a model title
and how many keep the first-message title, and that no title shows Markdown.

    .venv/bin/python bench/titles.py [--repeats 2] [--threads 2] [GGUF]

Each first message (questions of Debian's own FAQs, /usr/share/doc: zlib, procps,
valgrind, base-files, socat; three given Markdown marks as a user would type them) is
answered by the model as in the chat (CHAT_SYSTEM_PROMPT, 200 tokens, temperature
0.7), then titled twice: as the site titles now (memory.summary.title_messages under
TITLE_RESPONSE_FORMAT, read by title_from_reply, refused when it echoes the worked
example, Markdown stripped, judged by
conversations.titles.title_acceptable, else title_from_message) and with the previous
request (a plain-text title of the transcript in at most 24 tokens). Prints a Markdown
table (message, answer's first words, title shown, source) and the counts. The
engine runs in this process (no services, no database).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings.dev")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

from conversations.titles import (  # noqa: E402
    markdown_first_text,
    title_acceptable,
    title_from_message,
)
from inference.engines.llamacpp import LlamaCppEngine  # noqa: E402
from inference.protocol import Job  # noqa: E402
from memory.summary import (  # noqa: E402
    TITLE_MAX_TOKENS,
    TITLE_RESPONSE_FORMAT,
    title_echoes_example,
    title_from_reply,
    title_messages,
)

MESSAGES = [
    "Where can I get a Windows DLL version?",
    'Why do I get "undefined reference to gzputc"?',
    "Can zlib handle .zip archives?",
    "How do I install a shared zlib library on Unix?",
    "Can zlib decode Flate data in an Adobe PDF file?",
    "Can I use zlib in my commercial application?",
    "Will zlib work on a 64-bit machine?",
    "Can I access data randomly in a compressed stream?",
    "How can I encrypt/decrypt zip files with zlib?",
    'What\'s the difference between the "gzip" and "deflate" HTTP 1.1 encodings?',
    "Why does `ps -aux` complain about a bogus '-'?",
    "Why don't I see **SMP** (per-CPU) stats in top?",
    "Why is %CPU underreported for multi-threaded (Java, etc.) apps?",
    'How do you pronounce "Valgrind"?',
    "Why doesn't *Memcheck* find the array overruns in this program?",
    "Ok, but how do I know which distribution I'm running?",
    "Is there a Windows port of socat available?",
]
# The request before: the transcript, a plain-text answer, 24 tokens.
PREVIOUS_PROMPT = (
    "Write a short title (at most 6 words) for a conversation that starts like this. "
    "Answer with the title only, no quotes."
)
MARKDOWN = ("**", "`", "# ", "__", "](", "* ")


def run(engine: LlamaCppEngine, messages: list, params: dict) -> tuple[str, str]:
    """The model's text and finish reason for one job."""

    async def go() -> list:
        job = Job(job_id="titles", messages=messages, params=params)
        return [item async for item in engine.generate(job)]

    items = asyncio.run(go())
    text = "".join(getattr(item, "text", "") for item in items[:-1])
    return text, items[-1].finish_reason


def shown(model_title: str | None, first: str, answer: str) -> tuple[str, str]:
    """The title the list shows and where it came from (``model`` or ``fallback``),
    by the rule of conversations.services.conversation_title_generate."""
    title = markdown_first_text(model_title) if model_title else ""
    if title and title_acceptable(title, answer=answer):
        return title, "model"
    return title_from_message(
        first, max_chars=settings.CHAT_TITLE_MAX_CHARS
    ), "fallback"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    engine = LlamaCppEngine(
        model_path=args.model, n_ctx=2048, n_threads=args.threads, background_slot=False
    )
    asyncio.run(engine.start())
    counts = {(way, src): 0 for way in ("now", "before") for src in ("model", "fb")}
    cut = {"now": 0, "before": 0}
    markdown = 0
    print(f"model: {engine.model}\n")
    print("| first message | title shown (now) | source | before: model wrote | src |")
    print("|---|---|---|---|---|")
    for _ in range(args.repeats):
        for first in MESSAGES:
            answer, _finish = run(
                engine,
                [
                    {"role": "system", "content": settings.CHAT_SYSTEM_PROMPT},
                    {"role": "user", "content": first},
                ],
                {"max_tokens": 200, "temperature": 0.7},
            )
            text, finish = run(
                engine,
                title_messages(first),
                {
                    "max_tokens": TITLE_MAX_TOKENS,
                    "temperature": 0.2,
                    "response_format": TITLE_RESPONSE_FORMAT,
                },
            )
            complete = finish == "stop" and text.strip()
            cut["now"] += not complete
            model_title = title_from_reply(text.strip()) if complete else None
            if model_title and title_echoes_example(model_title, user_text=first):
                model_title = None  # as memory.summary.title_generate
            title, source = shown(model_title, first, answer)
            counts["now", "model" if source == "model" else "fb"] += 1
            markdown += any(mark in title for mark in MARKDOWN)
            transcript = f"User: {first}\nAssistant: {answer[:2000]}"
            old, old_finish = run(
                engine,
                [
                    {"role": "system", "content": PREVIOUS_PROMPT},
                    {"role": "user", "content": transcript},
                ],
                {"max_tokens": 24, "temperature": 0.2},
            )
            old_complete = old_finish == "stop" and old.strip()
            cut["before"] += not old_complete
            line = " ".join(old.strip().splitlines()[0].split()) if old.strip() else ""
            _t, old_source = shown(
                line.strip("\"'“”#* ") if old_complete else None, first, answer
            )
            counts["before", "model" if old_source == "model" else "fb"] += 1
            cell = line[:50].replace("|", "/") + ("" if old_complete else " (cut)")
            print(
                f"| {first.replace('|', '/')} | {title.replace('|', '/')} | {source} "
                f"| {cell} | {old_source} |"
            )
    total = args.repeats * len(MESSAGES)
    print(
        f"\nnow: {counts['now', 'model']}/{total} model titles, "
        f"{counts['now', 'fb']} first-message titles "
        f"({cut['now']} replies cut or empty); Markdown shown: {markdown}"
    )
    print(
        f"before: {counts['before', 'model']}/{total} model titles, "
        f"{counts['before', 'fb']} first-message titles "
        f"({cut['before']} replies cut or empty)"
    )
    asyncio.run(engine.close())


if __name__ == "__main__":
    main()

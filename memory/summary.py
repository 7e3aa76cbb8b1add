"""Background generations of memory: rolling summaries, titles, fact proposals.

Each one asks a pool's model through the inference tier (enqueue a job, wait for its
terminal event: :func:`inference.client.generation_run`) and accepts the answer only
if it is complete (the model ended it itself, no error, cut or timeout) and not empty;
otherwise it returns None, so a failed or partial summary never replaces the last
complete one (DESIGN §9).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from inference import client as inference_client

Message = dict[str, str]

SUMMARY_PROMPT = (
    "You keep a running summary of a conversation between a user and an assistant. "
    "Rewrite the summary so it also covers the new messages. Keep names, numbers, "
    "decisions and open questions. Answer with the summary only, at most 200 words."
)
TITLE_PROMPT = (
    "Write a short title (at most 6 words) for a conversation that starts like this. "
    "Answer with the title only, no quotes."
)
FACTS_PROMPT = (
    "List durable facts about the user stated in their messages below (name, "
    "preferences, work, plans), one per line starting with '- '. If there are none, "
    "answer NONE."
)


def _transcript(messages: Sequence[Message]) -> str:
    return "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages)


def _complete_text(
    *, pool: str, messages: list[Message], max_tokens: int, timeout_s: float
) -> str | None:
    result = inference_client.generation_run(
        pool=pool,
        messages=messages,
        params={"max_tokens": max_tokens, "temperature": 0.2},
        timeout_s=timeout_s,
        # nobody watches these: behind every turn on the pool (protocol.py, inf:qb)
        background=True,
    )
    text = result.text.strip()
    return text if result.complete and text else None


def summary_generate(
    *,
    previous: str,
    messages: Sequence[Message],
    pool: str,
    timeout_s: float,
    max_tokens: int = 300,
) -> str | None:
    """Return a new rolling summary of ``previous`` + ``messages``, or None on failure.

    ``max_tokens`` caps the summary (tokens); ``timeout_s`` bounds the wait (seconds).
    """
    content = (
        f"Current summary:\n{previous.strip() or '(none)'}\n\n"
        f"New messages:\n{_transcript(messages)}"
    )
    return _complete_text(
        pool=pool,
        messages=[
            {"role": "system", "content": SUMMARY_PROMPT},
            {"role": "user", "content": content},
        ],
        max_tokens=max_tokens,
        timeout_s=timeout_s,
    )


def title_generate(
    *, user_text: str, answer_text: str, pool: str, timeout_s: float
) -> str | None:
    """Return a model-written title for a conversation's first exchange, or None."""
    text = _complete_text(
        pool=pool,
        messages=[
            {"role": "system", "content": TITLE_PROMPT},
            {
                "role": "user",
                "content": _transcript(
                    [
                        {"role": "user", "content": user_text[:2000]},
                        {"role": "assistant", "content": answer_text[:2000]},
                    ]
                ),
            },
        ],
        max_tokens=24,
        timeout_s=timeout_s,
    )
    if text is None:
        return None
    line = " ".join(text.splitlines()[0].split()).strip("\"'“”#* ")
    return line or None


def facts_propose(
    *, messages: Sequence[Message], pool: str, timeout_s: float
) -> list[str]:
    """Return facts about the user the model finds in ``messages`` (maybe none)."""
    user_lines = [m for m in messages if m["role"] == "user"]
    if not user_lines:
        return []
    text = _complete_text(
        pool=pool,
        messages=[
            {"role": "system", "content": FACTS_PROMPT},
            {"role": "user", "content": _transcript(user_lines)},
        ],
        max_tokens=160,
        timeout_s=timeout_s,
    )
    if not text:
        return []
    facts = []
    for line in text.splitlines():
        match = re.match(r"^\s*[-*•]\s+(.+?)\s*$", line)
        if match and match.group(1).upper() != "NONE":
            facts.append(match.group(1)[:500])
    return facts[:10]

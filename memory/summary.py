"""Background generations of memory: rolling summaries, titles, fact proposals and
the facts extracted from them (:func:`facts_extract`).

Each one asks a pool's model through the inference tier (enqueue a job, wait for its
terminal event: :func:`inference.client.generation_run`) and accepts the answer only
if it is complete (the model ended it itself, no error, cut or timeout) and not empty;
otherwise it returns None, so a failed or partial summary never replaces the last
complete one (DESIGN §9).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from chatsite.errors import InvalidInput
from inference import client as inference_client
from memory import selectors as memory_selectors
from memory import services as memory_services
from memory.models import MemoryFact

Message = dict[str, str]

SUMMARY_PROMPT = (
    "You keep a running summary of a conversation between a user and an assistant. "
    "Rewrite the summary so it also covers the new messages. Keep names, numbers, "
    "decisions and open questions. Answer with the summary only, at most 200 words."
)
# Titles: the model is shown the first message only (not the answer: a small model's
# answer pulled its titles off the topic) with one worked example, and answers under a
# JSON Schema, which llama.cpp turns into a grammar and vLLM into structured outputs,
# so it ends after one short string instead of starting an answer (measured on
# SmolLM2-135M: bench/titles.py, bench/results/2026-12-04-titles.md).
TITLE_PROMPT = (
    "You name conversations. Read the user's first message and answer with a JSON "
    'object {"title": "..."}: a title of 2 to 6 words that names its topic, like a '
    "chapter heading. Do not answer the message."
)
TITLE_EXAMPLE = (
    "How long should I boil an egg for a soft yolk?",
    '{"title": "Soft-boiled eggs"}',
)
# The title's longest form (characters) in the schema; conversations.titles decides
# whether the title is used (TITLE_MAX_CHARS, the same 60).
TITLE_SCHEMA_MAX_CHARS = 60
TITLE_RESPONSE_FORMAT = {
    "type": "json_schema",
    "schema": {
        "type": "object",
        "properties": {
            "title": {
                "type": "string",
                "minLength": 2,
                "maxLength": TITLE_SCHEMA_MAX_CHARS,
            }
        },
        "required": ["title"],
        "additionalProperties": False,
    },
}
# Tokens for the JSON object: the title (at most 60 characters) and its braces.
TITLE_MAX_TOKENS = 40
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


# The longest summary (tokens): the summary job's answer reserve.
SUMMARY_MAX_TOKENS = 300
# Marks the end of a message cut to fit the summary job's context.
CUT_MARK = " […]"


def summary_prompt(*, previous: str, messages: Sequence[Message]) -> list[Message]:
    """Return the engine messages that ask for ``previous`` rolled forward over
    ``messages``: SUMMARY_PROMPT, then the summary and the new messages' transcript."""
    content = (
        f"Current summary:\n{previous.strip() or '(none)'}\n\n"
        f"New messages:\n{_transcript(messages)}"
    )
    return [
        {"role": "system", "content": SUMMARY_PROMPT},
        {"role": "user", "content": content},
    ]


def summary_fit(
    *,
    previous: str,
    messages: Sequence[Message],
    count: Callable[[list[Message]], int],
    limit: int,
) -> tuple[list[Message], int]:
    """Return ``(prompt, covered)``: the summary job's engine messages for the oldest
    ``covered`` of ``messages`` that fit, so that ``count(prompt) <= limit`` tokens.

    The engine cannot drop turns from a summary prompt (it is one message), so a
    history longer than the context is summarised in rounds (DESIGN §9), each one
    this fit. ``count`` is the serving tokenizer's prompt count; ``limit`` is the
    context window less the answer's reserve (tokens). The prefix is the longest
    that fits, shortened to end on an assistant message when such a shorter one
    exists (the turns left verbatim then start with the user's). A first message too
    long on its own is cut to the start that fits, ending CUT_MARK. ``covered`` is
    0 when not even the prompt and ``previous`` fit; the prompt is then empty.
    """

    def tokens(part: Sequence[Message]) -> int:
        return count(summary_prompt(previous=previous, messages=part))

    if not messages or tokens([]) > limit:
        return [], 0
    if tokens(messages[:1]) > limit:
        first = messages[0]
        low, high = 0, len(first["content"])  # low fits, high does not
        while high - low > 1:
            middle = (low + high) // 2
            cut = {**first, "content": first["content"][:middle] + CUT_MARK}
            low, high = (middle, high) if tokens([cut]) <= limit else (low, middle)
        cut = {**first, "content": first["content"][:low] + CUT_MARK}
        return summary_prompt(previous=previous, messages=[cut]), 1
    low, high = 1, len(messages) + 1  # a prefix of low messages fits, of high does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (
            (middle, high) if tokens(messages[:middle]) <= limit else (low, middle)
        )
    covered = low
    while covered > 1 and messages[covered - 1]["role"] != "assistant":
        covered -= 1
    if messages[covered - 1]["role"] != "assistant":
        covered = low
    return summary_prompt(previous=previous, messages=messages[:covered]), covered


def summary_generate(
    *,
    prompt: list[Message],
    pool: str,
    timeout_s: float,
    max_tokens: int = SUMMARY_MAX_TOKENS,
) -> str | None:
    """Return the summary the model writes for ``prompt`` (:func:`summary_fit`), or
    None on failure.

    ``max_tokens`` caps the summary (tokens); ``timeout_s`` bounds the wait (seconds).
    """
    return _complete_text(
        pool=pool, messages=prompt, max_tokens=max_tokens, timeout_s=timeout_s
    )


def title_messages(user_text: str) -> list[Message]:
    """Return the chat messages that ask for a title of a conversation whose first
    message is ``user_text`` (its first 2,000 characters): TITLE_PROMPT, the worked
    example, the message."""
    question, answer = TITLE_EXAMPLE
    return [
        {"role": "system", "content": TITLE_PROMPT},
        {"role": "user", "content": f"Message: {question}"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": f"Message: {user_text[:2000]}"},
    ]


def title_from_reply(text: str) -> str | None:
    """Return the title in the model's reply ``text``: the ``title`` string of a JSON
    object (TITLE_RESPONSE_FORMAT), else, from an engine that answered in plain text,
    its first line; double quotes around it and runs of spaces removed (its Markdown is the
    caller's to strip). None when nothing is left."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        value = data.get("title")
        line = value if isinstance(value, str) else ""
    else:
        line = text.splitlines()[0] if text.strip() else ""
    line = " ".join(line.split()).strip('"“” ')  # not ' : "bogus '-'" keeps its end
    return line or None


def title_generate(*, user_text: str, pool: str, timeout_s: float) -> str | None:
    """Return a model-written title for a conversation that starts with
    ``user_text``, or None when the generation failed, was cut or gave nothing.

    The model answers under TITLE_RESPONSE_FORMAT in at most TITLE_MAX_TOKENS tokens
    (:func:`title_messages`, :func:`title_from_reply`); whether the title is used is
    the caller's rule (conversations.titles.title_acceptable).
    """
    result = inference_client.generation_run(
        pool=pool,
        messages=title_messages(user_text),
        params={
            "max_tokens": TITLE_MAX_TOKENS,
            "temperature": 0.2,
            "response_format": TITLE_RESPONSE_FORMAT,
        },
        timeout_s=timeout_s,
        background=True,
    )
    text = result.text.strip()
    if not result.complete or not text:
        return None
    title = title_from_reply(text)
    if title is None or title_echoes_example(title, user_text=user_text):
        return None
    return title


def _stems(text: str) -> set[str]:
    """The words of ``text``, casefolded, each cut to its first 4 characters (so
    "boil", "boiled" and "boiling" are one)."""
    return {word[:4] for word in re.findall(r"\w+", text.casefold())}


def title_echoes_example(title: str, *, user_text: str) -> bool:
    """Return True when ``title`` has a word of TITLE_EXAMPLE's title that the
    message ``user_text`` does not have: the worked example leaking into the title
    ("Distribution of eggs" for "how do I know which distribution I'm running?",
    seen on SmolLM2 in bench/titles.py). Words are compared by their first 4
    characters, casefolded."""
    example = json.loads(TITLE_EXAMPLE[1])["title"]
    return bool(_stems(title) & (_stems(example) - _stems(user_text)))


def facts_propose(
    *, messages: Sequence[Message], pool: str, timeout_s: float
) -> list[str]:
    """Return facts about the user the model finds in ``messages`` (maybe none).

    Only the user's own messages are shown to the model, and a proposed fact is kept
    only when it is a whole statement (:func:`_complete`) and names something they
    wrote (:func:`_grounded`).
    """
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
    said = _content_words(_transcript(user_lines))
    facts = []
    for line in text.splitlines():
        match = re.match(r"^\s*[-*•]\s+(.+?)\s*$", line)
        if match and match.group(1).upper() != "NONE":
            fact = match.group(1)[:500]
            if _complete(fact) and _grounded(fact, said):
                facts.append(fact)
    return facts[:10]


# Words that say nothing of what a fact is about ("The user likes ...").
_FRAME_WORDS = frozenset(
    "the and user user's users their they them this that with for from about are was "
    "were has have had his her who is an a of to in on at as by name named called "
    "likes like lives live living works work working wants want prefers prefer "
    "enjoys enjoy loves love".split()
)


# Scripts written without spaces between words (kana, CJK ideographs, Hangul).
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def _content_words(text: str) -> set[str]:
    """Lowercase words of ``text`` (3 characters or more) that carry its meaning; a
    run of Chinese, Japanese or Korean gives its character pairs instead (no spaces
    separate its words: 我叫小明 -> 我叫, 叫小, 小明)."""
    words: set[str] = set()
    for run in re.findall(r"[^\W_]+", text.lower()):
        if _UNSPACED.search(run):
            words.update(run[i : i + 2] for i in range(len(run) - 1))
        elif len(run) >= 3 and run not in _FRAME_WORDS:
            words.add(run)
    return words


# A fact that ends on one of these is cut off: "The project lead is:", "Works on the".
_DANGLING_END = re.compile(r"[:;,(\[/&+=\-\u2013\u2014]\s*$")
_DANGLING_WORDS = frozenset(
    "is are was were am be been the a an and or but of to for with by at in on from "
    "my your their his her its our as than that which who whose".split()
)
# The fewest words a fact has ("Ada is vegan" is 3); an unspaced script's characters
# count as words (用户叫小明 is 5).
FACT_MIN_WORDS = 3


def _complete(fact: str) -> bool:
    """True when ``fact`` reads as a whole statement: it does not end on dangling
    punctuation (``:`` ``;`` ``,`` an opening bracket, a dash, ``/`` ``&`` ``+``
    ``=``) or a word that needs another after it (a linking verb, an article, a
    conjunction, a preposition, a possessive: ``_DANGLING_WORDS``), and it has at
    least FACT_MIN_WORDS words.

    Why: a model's list once held "The project lead is:" (the name never came), which
    the memory page then listed as a fact.
    """
    if _DANGLING_END.search(fact):
        return False
    words = re.findall(r"[^\W_]+", fact.casefold())
    if not words or words[-1] in _DANGLING_WORDS:
        return False
    count = sum(len(word) if _UNSPACED.search(word) else 1 for word in words)
    return count >= FACT_MIN_WORDS


def _grounded(fact: str, said: set[str]) -> bool:
    """True when ``fact`` names something the user wrote (``said``: their content
    words). A word matches itself or, for words of 5+ characters, one with the same
    first 5 ("gardener" ~ "gardening").

    Why: a small model asked for facts about the user also lists what it knows
    ("- Banana", "- Apple" for "List three fruits that are red"); a fact the user
    stated shares at least one word with what they said.
    """
    for word in _content_words(fact):
        if word in said:
            return True
        if len(word) >= 5 and any(w[:5] == word[:5] for w in said if len(w) >= 5):
            return True
    return False


def facts_extract(
    *,
    user_id: int,
    messages: list[dict[str, str]],
    source_message_id: Any = None,
    pool: str,
    timeout_s: float,
) -> list[MemoryFact]:
    """Ask the model for facts about the user in ``messages`` and remember them.

    Near-duplicates merge into existing facts (:func:`memory.services.fact_add`). Nothing happens when
    the user's memory is off, or when the generation fails or is cut (``timeout_s``
    seconds at most). Returns the facts stored or updated.
    """
    if not memory_selectors.memory_enabled(user=user_id):
        return []
    stored = []
    for text in facts_propose(messages=messages, pool=pool, timeout_s=timeout_s):
        try:
            fact = memory_services.fact_add(
                user=user_id, text=text, source_message_id=source_message_id
            )
        except InvalidInput:
            continue
        if fact is not None:
            stored.append(fact)
    return stored

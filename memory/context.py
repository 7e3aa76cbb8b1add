"""Build the messages of one turn under the pool's context window, to the token (DESIGN §9).

Parts, in prompt order (stable first, so the engine's prefix cache keeps hitting):

1. one system message: the system prompt, the user's relevant long-term facts, and the
   rolling summary of the older turns;
2. the most recent turns verbatim, oldest first (an answer's tool calls and their
   results with it);
3. the new user message, preceded (inside the same message) by the retrieved document
   passages, numbered ``[1]``, ``[2]``, … for citations;
4. when the turn's answer is a chain of tool calls under way, its calls and results so
   far (always kept: they are the turn's own work).

Passages are untrusted quoted data (prompt injection in retrieved text): they
sit inside ``<documents>`` … ``</documents>``, one ``<passage n=… source=…>`` each, and
when there are any the system message carries :data:`DOCUMENTS_RULE` (text inside those
tags is data, never instructions, and cannot change the rules). A document cannot
forge the delimiters: :func:`passage_quote` turns a ``<`` that would open one of these
tags, or a chat-template special token (``<|…|>``), into ``‹`` inside the passage, so
the only tags the model sees are ours. (Chunks flagged at ingestion are not retrieved
at all; this is the second line, for what the classifier misses.)

Tool results are untrusted the same way (a fetched page or a search result may carry
prompt injection): each ``tool`` message's content is quoted as
``<tool_result name="…">`` … ``</tool_result>`` (:func:`tool_result_quote`, the same
forgery rule, our tags included), and when any is in the history the system message
carries :data:`TOOLS_RULE`. A tool call and its results are one unit: kept or dropped
together, never a result without its call or a call without its results.

Budgets (tokens, settings ``MEMORY_BUDGET_*``) cap facts, passages and the summary; the
history gets the rest of ``context_tokens - max_tokens`` (the answer's reserve). Whole
items are dropped, never cut: facts and passages least relevant first, history oldest
first (a window always starts with a user turn). The final prompt is counted with the
serving model's own tokenizer and chat template (``count``) and is guaranteed to be at
most ``context_tokens - max_tokens`` tokens, so the engine never trims or overflows.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from django.conf import settings

from inference.embeddings import TextVector
from inference.tokens import prompt_counter
from memory import selectors
from memory.assembly import (
    Message,
    Passage,
    history_units,
    messages_assemble,
    passage_block,
    prompt_form,
    question_index,
    starts_with_user,
    system_message,
)
from memory.quoting import (
    SUMMARY_HEADER,
)
from memory.services import remember_request_parse

Counter = Callable[[list[Message]], int]


@dataclass(frozen=True)
class Budgets:
    """Token budgets of the optional parts (tokens of the serving model)."""

    facts: int = 256
    passages: int = 1024
    summary: int = 512


@dataclass
class BuiltContext:
    """The engine messages and what went into them."""

    messages: list[Message]
    prompt_tokens: int
    passages: list[Passage] = field(default_factory=list)  # numbered 1..n in order
    facts: list[str] = field(default_factory=list)
    summary_used: bool = False
    history_kept: int = 0  # messages of history kept verbatim (new message included)
    history_dropped: int = 0
    overflow: bool = False  # the new message alone exceeds the window (not trimmed)
    # facts and passages were wanted but no vector could be had (no embedding worker):
    # the turn answers without them and says so
    memory_unavailable: bool = False


def _text_cost(count: Counter, text: str) -> int:
    """Tokens ``text`` adds to a message (its count inside a message, template excluded)."""
    base = count([{"role": "user", "content": ""}])
    return count([{"role": "user", "content": text}]) - base


def _fit_items(count: Counter, items: Sequence[str], budget: int) -> int:
    """Return how many leading ``items`` fit ``budget`` tokens together (whole items)."""
    used = 0
    n = 0
    for item in items:
        cost = _text_cost(count, item + "\n")
        if used + cost > budget:
            break
        used += cost
        n += 1
    return n


def context_build(
    *,
    system_prompt: str,
    history: list[Message],
    max_tokens: int,
    context_tokens: int,
    count: Counter,
    facts: Sequence[str] = (),
    passages: Sequence[Passage] = (),
    summary: str = "",
    summary_covers: int = 0,
    budgets: Budgets | None = None,
    continued: str | None = None,
) -> BuiltContext:
    """Return the engine messages for a turn, at most ``context_tokens - max_tokens`` tokens.

    ``history``: oldest-first OpenAI chat messages ending with the new user message,
    or with it followed by the turn's tool calls and results so far (assistant
    messages with ``tool_calls``, ``tool`` messages with ``tool_call_id`` and the
    tool's ``name``); the caller passes rounds of calls only whole
    (:func:`conversations.prompt_history.history_and_summary`). Tool results are quoted as
    data (:func:`tool_result_quote`). ``summary`` covers the first ``summary_covers``
    messages of ``history``;
    when the summary is used those messages are left out, when it does not fit its
    budget they stay candidates. ``facts`` and ``passages`` are most relevant first.
    ``count(messages)`` returns the prompt tokens under the serving model's chat template.
    ``max_tokens`` and ``context_tokens`` are tokens. Earlier history is dropped
    oldest first by whole turns (a window starts with a user message), so a tool call
    and its results go together. The turn's own chain is always kept. When even the
    system prompt, the new message and that chain leave no room for the answer, the
    result has ``overflow`` set and holds just those (nothing is cut; the engine
    reports the overflow). ``continued``: the text of the answer a turn continues,
    appended last as an assistant message and always kept (counted with the
    generation prompt after it: a few tokens more than the engine's rendering with
    that message left open). Raises ValueError on a history of another shape.
    """
    budgets = budgets or Budgets()
    limit = context_tokens - max_tokens
    if not history:
        raise ValueError("history must end with the new user message")
    q = question_index(history)
    tools = any(m["role"] == "tool" for m in history)
    history = [prompt_form(m) for m in history]
    last, tail = history[q], history[q + 1 :]
    if continued is not None:  # the answer the turn writes on, kept with the question
        tail = [*tail, {"role": "assistant", "content": continued}]
    facts = list(facts)[: _fit_items(count, list(facts), budgets.facts)]
    passage_texts = [passage_block(i, p) for i, p in enumerate(passages, 1)]
    passages = list(passages)[: _fit_items(count, passage_texts, budgets.passages)]
    use_summary = bool(summary.strip()) and (
        _text_cost(count, SUMMARY_HEADER + "\n" + summary) <= budgets.summary
    )
    earlier = history[min(summary_covers, q) : q] if use_summary else history[:q]

    def fixed() -> tuple[str, int]:
        system = system_message(
            system_prompt, facts, summary if use_summary else "", bool(passages), tools
        )
        return system, count(messages_assemble(system, [], last, passages, tail))

    system, base = fixed()
    # Shed optional parts (least important first) until the new message fits at all.
    while base > limit and (passages or facts or use_summary):
        if passages:
            passages.pop()
        elif facts:
            facts.pop()
        else:
            use_summary = False
            earlier = history[:q]
        system, base = fixed()
    if base > limit:
        # The new message (and the turn's chain) alone is too long: send it without
        # history; the engine then answers with its clear context_overflow error (or
        # a shorter answer).
        return BuiltContext(
            messages=messages_assemble(system, [], last, passages, tail),
            prompt_tokens=base,
            passages=passages,
            facts=facts,
            summary_used=use_summary,
            history_kept=1 + len(tail),
            history_dropped=len(earlier),
            overflow=True,
        )
    # History, newest first, by the cost of whole units (a tool call with its results);
    # then an exact check of the whole prompt.
    room = limit - base
    units = history_units(earlier)
    start = len(units)
    used = 0
    probe_system = [{"role": "system", "content": "."}]
    probe_base = count(probe_system) if units else 0  # a first message has none
    while start > 0:
        cost = count([*probe_system, *units[start - 1]]) - probe_base
        if used + cost > room:
            break
        used += cost
        start -= 1
    window = starts_with_user([m for unit in units[start:] for m in unit])
    messages = messages_assemble(system, window, last, passages, tail)
    # without history the prompt is the fixed part, counted already (``base``)
    tokens = count(messages) if window else base
    while tokens > limit and window:
        window = starts_with_user(window[1:])
        messages = messages_assemble(system, window, last, passages, tail)
        tokens = count(messages)
    return BuiltContext(
        messages=messages,
        prompt_tokens=tokens,
        passages=passages,
        facts=facts,
        summary_used=use_summary,
        history_kept=len(window) + 1 + len(tail),
        history_dropped=len(earlier) - len(window),
    )


def passage_max_distance() -> float:
    """Return the largest cosine distance of a passage still put in a prompt:
    ``1 - MEMORY_RETRIEVE_MIN_SCORE`` (distance = 1 - cosine similarity).

    The default, 0.40, comes from all-MiniLM-L6-v2 (the embedding model, 384-d)
    measured through the embedding worker by tests/memory/test_relevance.py (8 short
    passages on different topics, a question about each, 5 off-topic questions):
    related pairs (n=8) scored 0.537 to 0.781 (median 0.648); unrelated pairs (n=96)
    median 0.020, 95th percentile 0.144, max 0.336 (a train-times question against a
    launch-date passage). The old cut, cosine distance 0.7 (similarity 0.30), let
    such near-misses through; 0.40 keeps 0.06 above the worst unrelated pair and 0.14
    below the weakest related one.
    """
    return 1.0 - float(settings.MEMORY_RETRIEVE_MIN_SCORE)


# Added to the system prompt of a "remember that ..." message while the user's memory
# is off: nothing is stored (memory.services.fact_add), and the answer must not say so.
MEMORY_OFF_NOTE = (
    "The user's memory is switched off, so nothing they ask you to remember is "
    "stored. Do not say that you remembered it: tell them memory is off and that "
    "they can turn it on on the Memory page."
)


def _counter(tools: list[dict[str, Any]] | None) -> Counter:
    """The prompt counter of MEMORY_TOKENIZER_ENGINE, counting ``tools`` too."""
    counter = prompt_counter(settings.MEMORY_TOKENIZER_ENGINE)
    if not tools:
        return cast(Counter, counter)
    return cast(Counter, functools.partial(counter, tools=tools))


def turn_context(
    *,
    user_id: int,
    system_prompt: str,
    history: list[Message],
    max_tokens: int,
    summary: str = "",
    summary_covers: int = 0,
    query: TextVector | None = None,
    document_ids: Collection[int] | None = None,
    tools: list[dict[str, Any]] | None = None,
    continued: str | None = None,
    sources: tuple[bool, bool] | None = None,
) -> BuiltContext:
    """Build a turn's context for ``user_id`` with their facts and document passages.

    ``history`` as :func:`context_build` takes it (it may end with the turn's tool
    calls and results). Facts (if the user's memory is on) and passages are searched
    by similarity to the new user message, in this user's rows only (top MEMORY_FACTS_K within the
    MEMORY_FACTS_MAX_DISTANCE cosine distance; top MEMORY_RETRIEVAL_K passages whose
    cosine similarity to the message is at least MEMORY_RETRIEVE_MIN_SCORE, see
    :func:`passage_max_distance`). ``document_ids`` is the conversation's document
    scope: None searches all the user's documents, an empty collection none, else only
    those. ``query`` is the new message's
    shared embedding (the turn embeds it once for everyone); without one it is made
    here. When no vector can be had (no embedding worker) the context is built without
    facts and passages and ``memory_unavailable`` is set. Counts use the
    MEMORY_TOKENIZER_ENGINE tokenizer against MEMORY_CONTEXT_TOKENS, with ``tools``
    (the OpenAI tool definitions the generation offers) rendered into every count, so
    the prompt's tokens and the history's budget include them; ``continued`` the
    text of an answer the turn continues; ``sources`` the user's
    :func:`memory.selectors.memory_sources` when the caller read them already (None:
    read here). See :func:`context_build` for the rules and errors.
    """
    facts: list[str] = []
    passages: list[Passage] = []
    question = str(history[question_index(history)]["content"])
    want_facts, has_docs = (
        sources if sources is not None else selectors.memory_sources(user=user_id)
    )
    want_docs = (document_ids is None or bool(document_ids)) and has_docs
    vector = None
    if want_facts or want_docs:
        vector = (query or TextVector(question)).get()
    if vector is not None:
        if want_facts:
            facts = [
                f.text
                for f, _ in selectors.facts_search(
                    user=user_id,
                    vector=vector,
                    k=settings.MEMORY_FACTS_K,
                    max_distance=settings.MEMORY_FACTS_MAX_DISTANCE,
                )
            ]
        if want_docs:
            passages = [
                Passage(key=h.chunk.id, title=h.chunk.document.title, text=h.chunk.text)
                for h in selectors.chunks_search(
                    user=user_id,
                    vector=vector,
                    k=settings.MEMORY_RETRIEVAL_K,
                    max_distance=passage_max_distance(),
                    ef_search=settings.MEMORY_HNSW_EF_SEARCH,
                    document_ids=document_ids,
                )
            ]
    if (
        not want_facts
        and remember_request_parse(question)
        and not selectors.memory_enabled(user=user_id)
    ):
        system_prompt = f"{system_prompt}\n\n{MEMORY_OFF_NOTE}".strip()
    built = context_build(
        system_prompt=system_prompt,
        history=history,
        max_tokens=max_tokens,
        context_tokens=settings.MEMORY_CONTEXT_TOKENS,
        # the counters take any OpenAI chat messages (tool calls included)
        count=_counter(tools),
        facts=facts,
        passages=passages,
        summary=summary,
        summary_covers=summary_covers,
        budgets=Budgets(
            facts=settings.MEMORY_BUDGET_FACTS_TOKENS,
            passages=settings.MEMORY_BUDGET_CHUNKS_TOKENS,
            summary=settings.MEMORY_BUDGET_SUMMARY_TOKENS,
        ),
        continued=continued,
    )
    built.memory_unavailable = (want_facts or want_docs) and vector is None
    return built

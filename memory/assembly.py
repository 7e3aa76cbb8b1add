"""The parts a prompt's context is assembled from: the system message (prompt,
facts, summary, the rules for quoted data), the question with its passages, history
in the engine's form (tool results quoted) and the units history is kept or dropped
by. :func:`memory.context.context_build` fits them to the budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memory.quoting import (
    DOCUMENTS_CLOSE,
    DOCUMENTS_OPEN,
    DOCUMENTS_RULE,
    FACTS_HEADER,
    PASSAGE_CLOSE,
    SOURCES_HEADER,
    SUMMARY_HEADER,
    TOOLS_RULE,
    attr_quote,
    passage_quote,
    tool_result_quote,
)

# An OpenAI chat message: {"role", "content"}, plus ``tool_calls`` (assistant) or
# ``tool_call_id`` and ``name`` (tool; ``name`` only read here, never sent).
Message = dict[str, Any]


@dataclass(frozen=True)
class Passage:
    """A retrieved chunk offered to the model: ``key`` identifies it to the caller."""

    key: int
    title: str
    text: str


def prompt_form(message: Message) -> Message:
    """Return ``message`` as the engine gets it: a tool result quoted as data (its
    ``name`` used in the quote, then dropped), every message with only the keys of
    OpenAI's chat format."""
    role = message["role"]
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message["tool_call_id"],
            "content": tool_result_quote(
                str(message.get("name") or ""), str(message["content"])
            ),
        }
    out: Message = {"role": role, "content": message["content"]}
    if role == "assistant" and message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    return out


def history_units(messages: list[Message]) -> list[list[Message]]:
    """Split history into the units it is kept or dropped by: a message alone, or an
    assistant message with ``tool_calls`` together with the tool results after it."""
    units: list[list[Message]] = []
    for m in messages:
        if m["role"] == "tool" and units and units[-1][0].get("tool_calls"):
            units[-1].append(m)
        else:
            units.append([m])
    return units


def passage_block(n: int, passage: Passage) -> str:
    return (
        f'<passage n="{n}" source="{attr_quote(passage.title)}">\n'
        f"{passage_quote(passage.text.strip())}\n{PASSAGE_CLOSE}"
    )


def system_message(
    system_prompt: str,
    facts: list[str],
    summary: str,
    passages: bool = False,
    tools: bool = False,
) -> str:
    parts = [system_prompt.strip()] if system_prompt.strip() else []
    if passages:
        parts.append(DOCUMENTS_RULE)
    if tools:
        parts.append(TOOLS_RULE)
    if facts:
        parts.append(FACTS_HEADER + "\n" + "\n".join(f"- {f}" for f in facts))
    if summary:
        parts.append(SUMMARY_HEADER + "\n" + summary.strip())
    return "\n\n".join(parts)


def question_message(content: str, passages: list[Passage]) -> str:
    if not passages:
        return content
    sources = "\n".join(passage_block(n, p) for n, p in enumerate(passages, 1))
    return (
        f"{SOURCES_HEADER}\n{DOCUMENTS_OPEN}\n{sources}\n{DOCUMENTS_CLOSE}\n\n"
        f"My message:\n{content}"
    )


def messages_assemble(
    system: str,
    window: list[Message],
    last: Message,
    passages: list[Passage],
    tail: Sequence[Message] = (),
) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": system}] if system else []
    messages += window
    messages.append(
        {"role": "user", "content": question_message(last["content"], passages)}
    )
    messages += tail
    return messages


def starts_with_user(window: list[Message]) -> list[Message]:
    while window and window[0]["role"] != "user":
        window = window[1:]
    return window


def question_index(history: list[Message]) -> int:
    """Return the index of the new user message in ``history`` (the last user
    message; what follows it is the turn's tool calls and results so far). Raise
    ValueError when there is none, or something else follows it."""
    q = max((i for i, m in enumerate(history) if m["role"] == "user"), default=-1)
    if q < 0:
        raise ValueError("history must end with the new user message")
    tail = history[q + 1 :]
    for m in tail:
        if m["role"] != "tool" and not (
            m["role"] == "assistant" and m.get("tool_calls")
        ):
            raise ValueError(
                "history must end with the new user message, or with it and the "
                "turn's tool calls and results"
            )
    return q

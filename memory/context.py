"""Build the messages sent to the engine for one turn (DESIGN §9).

Prompt layout is prefix-cache friendly: the fixed system prompt first, then history,
newest last. The history window is a message count today; the engine trims further with
its own tokenizer so the prompt always fits its context window. Token-budgeted memory,
facts and retrieval come with issue #5.
"""

from __future__ import annotations


def context_build(
    *, system_prompt: str, history: list[dict[str, str]], max_messages: int
) -> list[dict[str, str]]:
    """Return ``[system] + the last max_messages of history`` in OpenAI chat format.

    ``history`` is oldest-first ``{"role", "content"}`` dicts ending with the new user
    message. The window never starts with an assistant message (chat templates expect a
    user turn after the system prompt).
    """
    window = history[-max_messages:] if max_messages > 0 else history[-1:]
    while len(window) > 1 and window[0]["role"] != "user":
        window = window[1:]
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": m["role"], "content": m["content"]} for m in window]

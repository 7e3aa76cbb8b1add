"""The window of a conversation that input moderation judges besides its newest
message: the last few user turns joined, so a request split over several messages is
caught (:func:`safety.services.input_moderate`, :func:`safety.services.messages_moderate`)."""

from __future__ import annotations

from collections.abc import Sequence

# Characters of each message a window keeps (its end: a split request's last part is
# what asks); 3 turns of 300 characters stay within the embedding model's 256 word
# pieces for ordinary prose.
WINDOW_CHARS_PER_TURN = 300


def window_text(messages: Sequence[dict[str, str]], *, turns: int) -> str | None:
    """The last ``turns`` user messages of ``messages`` joined by newlines, oldest
    first, or None when there are fewer than two (the newest alone is screened
    anyway). The embedding model reads its first 256 word pieces, so the window keeps
    each message's last :data:`WINDOW_CHARS_PER_TURN` characters."""
    users = [
        str(m.get("content") or "").strip() for m in messages if m.get("role") == "user"
    ]
    users = [u for u in users if u][-turns:] if turns > 1 else []
    if len(users) < 2:
        return None
    return "\n".join(u[-WINDOW_CHARS_PER_TURN:] for u in users)

"""Split text into overlapping, token-sized chunks that drop no character (DESIGN §9).

Sizes are in tokens of the embedding model's tokenizer (all-MiniLM-L6-v2 word pieces),
so a chunk fits what the model reads. The text is first cut into *units* that tile it
exactly: unit i runs from the start of token i to the start of token i+1 (the first
unit starts at character 0, the last ends at the end of the text), so whitespace and
characters the tokenizer skips belong to a unit. A unit longer than ``max_chars``
characters (one "word" of thousands of letters is a single unknown token) is split into
pieces of at most ``max_chars``. Chunks are windows of at most ``max_tokens`` units (and
``max_chars`` characters); each next window starts ``overlap_tokens`` units before the
previous one ends, so every character lies in at least one chunk and neighbours share
up to ``overlap_tokens`` units.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A tokenizer function: text -> the (start, end) character offsets of its tokens.
Offsets = Callable[[str], list[tuple[int, int]]]


@dataclass(frozen=True)
class TextChunk:
    """A passage: ``text == source[start:end]`` (character offsets, end exclusive)."""

    ord: int
    start: int
    end: int
    text: str


@functools.cache
def _untruncated_tokenizer() -> Any:
    from tokenizers import Tokenizer

    from inference.embedding_model import embedding_tokenizer

    # A copy: the model's own tokenizer truncates to 256 tokens and must stay so.
    tokenizer = Tokenizer.from_str(embedding_tokenizer().to_str())
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def embedding_offsets(text: str) -> list[tuple[int, int]]:
    """Return the character offsets of the embedding model's tokens in ``text``."""
    encoding = _untruncated_tokenizer().encode(text, add_special_tokens=False)
    return [(s, e) for s, e in encoding.offsets if e > s]


def _units(
    text: str, offsets: list[tuple[int, int]], max_chars: int
) -> list[tuple[int, int]]:
    starts = sorted({s for s, _ in offsets if 0 < s < len(text)})
    bounds = [0, *starts, len(text)]
    units: list[tuple[int, int]] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        while b - a > max_chars:
            units.append((a, a + max_chars))
            a += max_chars
        if b > a:
            units.append((a, b))
    return units


def text_chunk(
    text: str,
    *,
    max_tokens: int = 200,
    overlap_tokens: int = 40,
    max_chars: int | None = None,
    offsets: Offsets | None = None,
) -> list[TextChunk]:
    """Split ``text`` into chunks of at most ``max_tokens`` tokens (see module docstring).

    ``overlap_tokens`` (< max_tokens) tokens are repeated between neighbours;
    ``max_chars`` (default ``max_tokens * 8``) caps one chunk's length in characters.
    ``offsets`` defaults to the embedding model's tokenizer. Empty text gives no chunk.
    Raises ValueError for a non-positive size or an overlap not below the size.
    """
    if max_tokens < 1 or not 0 <= overlap_tokens < max_tokens:
        raise ValueError("need max_tokens >= 1 and 0 <= overlap_tokens < max_tokens")
    if not text:
        return []
    max_chars = max_chars or max_tokens * 8
    units = _units(text, (offsets or embedding_offsets)(text), max_chars)
    chunks: list[TextChunk] = []
    i = 0
    while i < len(units):
        j = i + 1
        while (
            j < len(units)
            and j - i < max_tokens
            and units[j][1] - units[i][0] <= max_chars
        ):
            j += 1
        start, end = units[i][0], units[j - 1][1]
        chunks.append(
            TextChunk(ord=len(chunks), start=start, end=end, text=text[start:end])
        )
        if j >= len(units):
            break
        # The next window starts overlap_tokens units before this one's end (no gap).
        i = max(i + 1, j - overlap_tokens)
    return chunks

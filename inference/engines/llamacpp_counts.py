"""Count a rendered prompt's tokens with llama.cpp, piece by piece, remembering pieces.

An API client sends the whole conversation with every request, so all but its newest
message were counted by the request before. llama.cpp tokenizes a prompt (``special``
on) in two passes (``llama_vocab::impl::tokenize`` in llama.cpp's ``llama-vocab.cpp``):
``tokenizer_st_partition`` first cuts the text at every occurrence of a special
token's text (longest token first, each fragment searched left to right), and each
text fragment between two such tokens is then tokenized on its own. For a BPE
vocabulary (GPT-2 style: SmolLM2, Qwen, Llama 3) nothing crosses a cut: no space
prefix is added and no merge spans two fragments. So the prompt's token count is
the number of special tokens plus the sum of its fragments' counts, and a fragment's
count (a message's rendered text, in practice) can be remembered by a digest of its
text: :class:`FragmentCounter`. Vocabularies where a cut is not independent (SPM's
space prefix after a special token, a special token that strips the whitespace
beside it) are counted whole, as before.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

# Fragments whose counts are remembered, per process (a digest and an int each:
# about 150 bytes); the least recently used is forgotten first.
FRAGMENTS_KEPT = 20_000

_VOCAB_TYPE_BPE = 2  # llama.cpp's LLAMA_VOCAB_TYPE_BPE


def bytes_count(vocab: Any, text: bytes) -> int:
    """The number of tokens llama.cpp's tokenizer makes of ``text`` (no BOS, special
    tokens parsed), without building the list: ``llama_tokenize`` given no room
    returns minus the count it needs (llama.h)."""
    import llama_cpp

    if not text:
        return 0
    room = (llama_cpp.llama_token * 1)()
    return -llama_cpp.llama_tokenize(vocab, text, len(text), room, 0, False, True)


def special_texts(vocab: Any, model: Any) -> list[str] | None:
    """The texts of the vocabulary's special tokens as llama.cpp's partition tries
    them (control, user-defined and unknown tokens, longest first); None when a cut
    at them does not make independent fragments (not a BPE vocabulary, or a special
    token that strips whitespace beside it)."""
    import llama_cpp

    if llama_cpp.llama_vocab_type(vocab) != _VOCAB_TYPE_BPE:
        return None
    special = (
        llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
        | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
    )
    strips = llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP | llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP
    texts = []
    for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        attr = llama_cpp.llama_vocab_get_attr(vocab, token)
        if not attr & special:
            continue
        if attr & strips:
            return None
        text = model.token_get_text(token)
        if text:
            texts.append(text)
    # llama.cpp sorts by length only; a stable sort keeps its id order for ties
    return sorted(texts, key=len, reverse=True)


def partition(text: str, specials: list[str]) -> tuple[list[str], int]:
    """``text`` cut as llama.cpp's ``tokenizer_st_partition`` cuts it: the text
    fragments between special tokens (in order, empty ones left out) and the number
    of special tokens found."""
    fragments = [text] if text else []
    found = 0
    for special in specials:
        cut: list[str] = []
        for fragment in fragments:
            if special not in fragment:
                cut.append(fragment)
                continue
            pieces = fragment.split(special)
            found += len(pieces) - 1
            cut.extend(piece for piece in pieces if piece)
        fragments = cut
    return fragments, found


class FragmentCounter:
    """A prompt's token count as llama.cpp counts it (:func:`bytes_count` of the
    whole), summed from its fragments' remembered counts where the vocabulary allows
    (module docstring). Thread-safe; remembers digests of fragments, never their
    text, at most FRAGMENTS_KEPT of them."""

    def __init__(self, llm: Any, *, lock: threading.Lock | None = None) -> None:
        """``llm``: a llama_cpp ``Llama`` (a vocabulary-only load will do);
        ``lock``: the one held around every other use of its tokenizer."""
        self._vocab = llm._model.vocab
        self._specials = special_texts(self._vocab, llm._model)
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self._lock = lock or threading.Lock()

    @property
    def by_fragment(self) -> bool:
        """Whether prompts are counted fragment by fragment (else whole)."""
        return self._specials is not None

    def count(self, text: str) -> int:
        """The number of tokens of ``text`` (a rendered prompt)."""
        if self._specials is None:
            with self._lock:
                return bytes_count(self._vocab, text.encode("utf-8"))
        fragments, total = partition(text, self._specials)
        for fragment in fragments:
            total += self._fragment_count(fragment)
        return total

    def _fragment_count(self, fragment: str) -> int:
        raw = fragment.encode("utf-8")
        key = hashlib.blake2b(raw, digest_size=16).digest()
        with self._lock:
            known = self._counts.get(key)
            if known is not None:
                self._counts.move_to_end(key)
                return known
            counted = bytes_count(self._vocab, raw)
            self._counts[key] = counted
            if len(self._counts) > FRAGMENTS_KEPT:
                self._counts.popitem(last=False)
            return counted

"""A prompt cache for the llama.cpp engine: the KV states of a few recent prompts.

A ``Llama`` context keeps the KV of its last request only, so a worker that serves
several conversations in turn (conversation affinity sends each one's turns back to
it: inference/affinity.py) would prefill each turn's whole history again: the context
holds the other conversation's. :class:`PromptStates` keeps the KV state of each
finished request (``llama_state_get_data``: the KV cells in use, about 23 KiB per
token for SmolLM2-135M in f16), least recently used first out past ``capacity_bytes``;
before a request the slot loads the state sharing the longest token prefix with its
prompt when that is longer than what the slot holds. llama-cpp-python's own
``LlamaRAMCache`` is not used: ``Llama.save_state`` also copies the logits of a whole
batch (``n_batch`` x vocabulary floats, 96 MiB for SmolLM2), and ``generate``
refreshes the logits anyway by evaluating at least one prompt token.

Thread-safe (one lock; slots run in threads). Sizes in bytes, prefixes in tokens.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from typing import Any

# A saved prefix shorter than this many tokens is not worth a load (the system
# prompt alone is re-read in a few ms).
MIN_PREFIX = 32


def _common(a: Any, b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PromptStates:
    """LRU of KV states by token sequence, up to ``capacity_bytes`` in all."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._states: OrderedDict[tuple[int, ...], bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.loads = 0

    def __len__(self) -> int:
        return len(self._states)

    def save(self, llm: Any) -> None:
        """Keep ``llm``'s current KV state (its prompt and answer tokens)."""
        import llama_cpp

        n = int(llm.n_tokens)
        if n < MIN_PREFIX:
            return
        key = tuple(int(t) for t in llm._input_ids[:n])
        ctx = llm._ctx.ctx
        size = int(llama_cpp.llama_state_get_size(ctx))
        if size > self.capacity_bytes:
            return
        buffer = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_get_data(ctx, buffer, size))
        data = bytes(memoryview(buffer)[:written])
        with self._lock:
            old = self._states.pop(key, None)
            if old is not None:
                self._size -= len(old)
            # a state whose tokens begin this one's is covered by it
            for other in [k for k in self._states if k == key[: len(k)]]:
                self._size -= len(self._states.pop(other))
            self._states[key] = data
            self._size += len(data)
            while self._size > self.capacity_bytes and self._states:
                _k, dropped = self._states.popitem(last=False)
                self._size -= len(dropped)

    def restore(self, llm: Any, tokens: list[int]) -> int:
        """Load into ``llm`` the saved state sharing the longest prefix with
        ``tokens`` (the prompt) when it beats what ``llm`` holds by MIN_PREFIX
        tokens; return the prefix it then shares with ``tokens``."""
        import llama_cpp

        held = _common(llm._input_ids[: llm.n_tokens], tokens)
        with self._lock:
            best, best_key = held, None
            for key in self._states:
                shared = _common(key, tokens)
                if shared > best:
                    best, best_key = shared, key
            if best_key is None or best - held < MIN_PREFIX:
                return held
            self._states.move_to_end(best_key)
            data = self._states[best_key]
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if int(llama_cpp.llama_state_set_data(llm._ctx.ctx, buffer, len(data))) != len(
            data
        ):
            llm.reset()
            return 0
        n = len(best_key)
        llm.input_ids[:n] = best_key
        llm.n_tokens = n
        llm._requires_eval = True
        self.loads += 1
        return best

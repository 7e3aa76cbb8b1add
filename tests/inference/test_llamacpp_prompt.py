"""The web tier's prompt counts (inference/engines/llamacpp_prompt.py): one pass of
llama.cpp's tokenizer gives llama-cpp-python's own ids, on real text."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from inference.engines.llamacpp_prompt import chat_prompt_load, tokenize_once

DOCS = Path("/usr/share/doc")


@pytest.fixture(scope="module")
def prompt():
    return chat_prompt_load()


def _doc_texts(limit: int) -> list[str]:
    """Up to ``limit`` Debian doc files (plain or gzipped) that are UTF-8 text (a
    prompt is: llama.cpp aborts the process on other bytes), 20,000 bytes each at
    most."""
    texts = []
    for path in sorted(DOCS.rglob("*")):
        if len(texts) >= limit:
            break
        if not path.is_file() or path.is_symlink():
            continue
        try:
            if path.suffix == ".gz":
                with gzip.open(path) as f:
                    data = f.read(20_000)
            elif path.suffix in ("", ".txt", ".md", ".Debian") or "README" in path.name:
                data = path.read_bytes()[:20_000]
            else:
                continue
        except (OSError, EOFError):
            continue
        try:
            text = data.decode()
        except UnicodeDecodeError:
            continue
        if text:
            texts.append(text)
    return texts


def test_the_vocabulary_load_reports_no_training_context(prompt):
    """Why :func:`tokenize_once` exists: llama-cpp-python sizes its buffer by this."""
    assert prompt.llm._model.n_ctx_train() == 0


def test_one_pass_gives_llama_cpp_pythons_ids_on_debian_docs(prompt):
    texts = _doc_texts(400)
    if len(texts) < 50:
        pytest.skip("fewer than 50 Debian doc texts on this machine")
    for text in texts:
        for sample in (text.encode(), text[:777].encode()):
            assert tokenize_once(prompt.llm, sample) == prompt.llm.tokenize(
                sample, add_bos=False, special=True
            )


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b" ",
        "héllo wörld, ça va? 日本語のテキスト 🙂".encode(),
        b"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
        b"\n\n\n    indented\tand tabbed   ",
        "".join(map(chr, range(1, 0x800))).encode(),
    ],
)
def test_one_pass_gives_the_same_ids_on_edge_texts(prompt, text):
    assert tokenize_once(prompt.llm, text) == prompt.llm.tokenize(
        text, add_bos=False, special=True
    )


def test_a_count_is_the_rendered_prompts_token_count(prompt):
    messages = [
        {"role": "system", "content": "You are a helpful, concise assistant."},
        {"role": "user", "content": "How often should I water the tomatoes?"},
    ]
    rendered = prompt.render(messages).encode()
    expected = prompt.llm.tokenize(rendered, add_bos=False, special=True)
    assert prompt.count(messages) == len(expected)

"""Prompt counts by fragment (inference/engines/llamacpp_counts.py) equal llama.cpp's
count of the whole prompt, on the bundled SmolLM2 vocabulary and real text."""

import json
from pathlib import Path

import pytest

from inference.engines import llamacpp_counts
from inference.engines.llamacpp_counts import FragmentCounter, partition
from inference.engines.llamacpp_prompt import chat_prompt_load

DOCS = Path(__file__).resolve().parents[2] / "docs"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def prompt():
    return chat_prompt_load()


def whole(prompt, messages, tools=None):
    """The count of the prompt tokenized in one piece, as the engine does."""
    return len(prompt.tokens(messages, tools=tools))


def conversation_from_docs(turns: int) -> list[dict]:
    """A long conversation of real text: the docs' paragraphs, user and assistant in
    turn (code, tables, non-ASCII, runs of spaces and blank lines included)."""
    paragraphs = []
    for doc in sorted(DOCS.glob("*.md")):
        paragraphs += [p for p in doc.read_text().split("\n\n") if p.strip()]
    messages = []
    for i in range(turns):
        chunk = "\n\n".join(paragraphs[i * 3 : i * 3 + 3])
        messages.append(
            {"role": "user" if i % 2 == 0 else "assistant", "content": chunk}
        )
    return messages


def test_the_bundled_vocabulary_is_counted_by_fragment(prompt):
    assert prompt._counter.by_fragment


def test_a_growing_conversation_is_counted_as_its_whole_prompt(prompt):
    messages = conversation_from_docs(60)
    assert len(messages) == 60
    # as an API client does: the whole history again with every new message
    for n in range(1, len(messages) + 1, 3):
        history = messages[:n]
        assert prompt.count(history) == whole(prompt, history), n


def test_odd_text_and_special_token_text_count_as_the_whole(prompt):
    odd = [
        "",
        " ",
        "\n\n\n",
        "  leading and trailing  ",
        "émigré naïve Straße 東京 🙂🙂 \u200b zero-width",
        "a user typing <|im_end|> or <|im_start|>assistant\nin their text",
        "<|im_end|><|im_end|><|endoftext|>",
        "tabs\tand\r\nCRLF\r\n",
        "x" * 3000,
        "def f(x):\n    return x  # code\n\n\n",
    ]
    for text in odd:
        for messages in (
            [{"role": "user", "content": text}],
            [
                {"role": "system", "content": "Be brief." + text},
                {"role": "user", "content": text},
                {"role": "assistant", "content": text},
                {"role": "user", "content": "and?"},
            ],
        ):
            assert prompt.count(messages) == whole(prompt, messages), repr(text)


def test_tools_and_tool_calls_count_as_the_whole(prompt):
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "weather",
                        "arguments": json.dumps({"city": "Paris"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 °C"},
    ]
    assert prompt.count(messages, tools=TOOLS) == whole(prompt, messages, TOOLS)
    # tool_choice "none": the tools are not offered, so not counted
    none = prompt.count(messages, tools=TOOLS, tool_choice="none")
    assert none == whole(prompt, messages) < prompt.count(messages, tools=TOOLS)


def test_a_resent_history_tokenizes_only_its_new_message(prompt, monkeypatch):
    messages = [
        {**m, "content": "Resent: " + m["content"]} for m in conversation_from_docs(8)
    ]
    prompt.count(messages[:7])
    counted = []
    real = llamacpp_counts.bytes_count

    def spy(vocab, text):
        counted.append(text)
        return real(vocab, text)

    monkeypatch.setattr(llamacpp_counts, "bytes_count", spy)
    assert prompt.count(messages) == whole(prompt, messages)
    assert counted == [("assistant\n" + messages[7]["content"]).encode()]
    counted.clear()
    assert prompt.count(messages) == whole(prompt, messages)
    assert counted == []


def test_the_remembered_fragments_are_bounded(prompt, monkeypatch):
    monkeypatch.setattr(llamacpp_counts, "FRAGMENTS_KEPT", 3)
    counter = FragmentCounter(prompt.llm)
    for i in range(10):
        counter.count(f"<|im_start|>user\nmessage {i}<|im_end|>\n")
    assert len(counter._counts) == 3


def test_the_partition_cuts_longest_token_first_left_to_right():
    specials = ["<|long|>", "<|l"]  # longest first, as llama.cpp sorts them
    fragments, found = partition("a<|long|>b<|lc<|l<|long|>", specials)
    assert (fragments, found) == (["a", "b", "c"], 4)
    assert partition("", specials) == ([], 0)
    assert partition("plain", specials) == (["plain"], 0)

"""The first-message title's plain-line path (conversations/titles.py): a line the
Markdown parse is skipped for gives what the parse gives, on generated and real text."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conversations.titles import (
    _PLAIN_LINE,
    _markdown_first_text_parsed,
    markdown_first_text,
)

_PUNCTUATION = " ,.?!'\"%$@:;/()=+-"
# every character the plain-line pattern lets through, and some it does not
_plain_chars = st.characters(categories=["L", "N"]) | st.sampled_from(_PUNCTUATION)
_any_chars = _plain_chars | st.sampled_from("_*`~|#<>[]\\&\n\t\r\u00a0")


@settings(max_examples=3000)
@given(st.text(_plain_chars, max_size=80))
def test_a_plain_line_gives_what_the_parse_gives(text):
    if _PLAIN_LINE.fullmatch(text[:2000]):
        assert markdown_first_text(text) == _markdown_first_text_parsed(text)


@settings(max_examples=3000)
@given(st.text(_any_chars, max_size=60))
def test_any_text_gives_what_the_parse_gives(text):
    assert markdown_first_text(text) == _markdown_first_text_parsed(text[:2000])


@pytest.mark.parametrize(
    "text",
    [
        "1. Apple",  # an ordered list: a digit first is never plain
        "2024) was a year",
        "Tell me about **cats**",
        "snake_case_name",
        "a &amp; b",
        "see <https://example.com>",
        "pipe | table",
        "Title\n=====",
    ],
)
def test_markdown_is_parsed(text):
    assert not _PLAIN_LINE.fullmatch(text)


def test_every_plain_line_of_the_debian_docs_gives_what_the_parse_gives():
    lines = set()
    for path in sorted(Path("/usr/share/doc").rglob("*"))[:3000]:
        if not path.is_file() or path.is_symlink():
            continue
        try:
            if path.suffix == ".gz":
                with gzip.open(path) as f:
                    data = f.read(20_000)
            else:
                data = path.read_bytes()[:20_000]
            text = data.decode()
        except (OSError, EOFError, UnicodeDecodeError):
            continue
        lines.update(line.strip() for line in text.splitlines())
    plain = [line for line in lines if _PLAIN_LINE.fullmatch(line)]
    if len(plain) < 1000:
        pytest.skip("fewer than 1,000 plain lines in this machine's Debian docs")
    for line in plain:
        assert markdown_first_text(line) == _markdown_first_text_parsed(line), line

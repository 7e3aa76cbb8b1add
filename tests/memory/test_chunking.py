"""Token-sized, overlapping chunks that drop no character (memory/chunking.py)."""

import pytest

from memory.chunking import embedding_offsets, text_chunk


def covered(text, chunks):
    seen = [False] * len(text)
    for c in chunks:
        assert c.text == text[c.start : c.end]
        for i in range(c.start, c.end):
            seen[i] = True
    return all(seen)


def test_a_b_c_run_with_max_150_keeps_every_character():
    text = "A" * 100 + "B" * 100 + "C" * 3000
    chunks = text_chunk(text, max_tokens=150, overlap_tokens=20)
    assert covered(text, chunks)
    assert "".join(c.text for c in chunks).count("B") >= 100
    assert all(len(c.text) <= 150 * 8 for c in chunks)


def test_text_without_final_punctuation_keeps_its_tail():
    text = " ".join(f"word{i}" for i in range(700)) + " and the last words here"
    chunks = text_chunk(text, max_tokens=64, overlap_tokens=8)
    assert covered(text, chunks)
    assert chunks[-1].text.endswith("the last words here")
    assert len(chunks) > 5


def test_chunks_are_at_most_max_tokens_and_overlap():
    text = "The quick brown fox jumps over the lazy dog. " * 200
    chunks = text_chunk(text, max_tokens=50, overlap_tokens=10)
    assert covered(text, chunks)
    for c in chunks:
        assert len(embedding_offsets(c.text)) <= 50
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start < a.end  # neighbours share text
        assert b.start > a.start
    assert [c.ord for c in chunks] == list(range(len(chunks)))


def test_whitespace_and_unicode_between_tokens_are_kept():
    text = "  Grüße,\n\n\tWelt!  \u200b 東京  \n"
    chunks = text_chunk(text, max_tokens=3, overlap_tokens=1)
    assert covered(text, chunks)


def test_empty_text_gives_no_chunk_and_bad_sizes_raise():
    assert text_chunk("", max_tokens=10, overlap_tokens=2) == []
    with pytest.raises(ValueError):
        text_chunk("x", max_tokens=10, overlap_tokens=10)

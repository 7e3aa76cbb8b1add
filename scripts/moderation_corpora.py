"""Build the benign corpora of the moderation classifier from text nobody here wrote.

    python scripts/moderation_corpora.py [--out safety/data/corpora] [--perturbed-only]

Reads documentation that Debian packages install (``apt-get install`` the packages
named in safety/data/README.md) and writes one JSONL file per source (``text``,
``labels`` ``[]``, ``tags`` ``["corpus", "<kind>"]``; kind is ``sentence``,
``question``, ``paragraph`` or ``code``), each a seeded sample of at most its quota,
sorted as drawn, so a rerun on the same package versions writes the same files. Then
the perturbation set (:mod:`safety.perturbation`) from the evaluation files and the
everyday held-out set; ``--perturbed-only`` rebuilds just that from the files in
``--out``.

Sources (``SOURCES``): the *training* side (``train_*``: hard negatives for
``moderation_train``) are the Linux man pages (``manpages``, sections 2-7), the Python
library reference and HOWTOs, tutorial and FAQ (``python3-doc``), the Debian FAQ
(``debian-faq``), the non-offensive fortunes (``fortunes-min``, ``fortunes``; the
offensive set, ``fortunes-off``, is not read), the Debian Reference, the Developer's
Reference, git's documentation, the New Maintainers' Guide and the Debian
Administrator's Handbook (English); the *evaluation* side (``eval_*``: only ever
measured) is listed in ``SOURCES`` after them. A source moves from evaluation to
training once its figures were looked at (safety/data/README.md). Raises
``FileNotFoundError`` when a package is missing.
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

from scripts.corpus_readers import (  # noqa: E402
    adoc_paragraphs,
    html_paragraphs,
    pod_paragraphs,
    roff_paragraphs,
    rst_paragraphs,
)

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
PERTURBED_SEED = 2512
MIN_WORDS, MAX_CHARS = 3, 600
PERTURBED_FROM_CORPORA = 2000
# fortune files named before this train, the others evaluate (art ... kids | law ... zippy)
FORTUNES_SPLIT = "l"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(])")


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


def _package_files(package: str, pattern: str) -> list[Path]:
    """The files of Debian package ``package`` (its dpkg file list, so not what other
    packages put beside them, nor a second path through a symlink) whose path matches
    the regular expression ``pattern``, sorted."""
    listing = Path(f"/var/lib/dpkg/info/{package}.list")
    if not listing.exists():
        raise FileNotFoundError(f"install the {package} package")
    names = listing.read_text().split()
    found = sorted(Path(n) for n in names if re.match(pattern, n))
    if not found:
        raise FileNotFoundError(f"no file of {package} matches {pattern}")
    return found


def _manpages_files() -> list[Path]:
    """Sections 2-7 of the ``manpages`` package, not every page that other packages
    installed."""
    return _package_files("manpages", r"/usr/share/man/man[2-7]/.+\.gz$")


def _fortune_files(train: bool) -> list[Path]:
    """The fortune files whose names sort before ``FORTUNES_SPLIT`` (train) or from it
    on (evaluation): two disjoint sets of files."""
    files = [p for p in _files(FORTUNES, "*") if p.is_file() and not p.suffix]
    return [p for p in files if (p.name < FORTUNES_SPLIT) == train]


# name -> (files, reader, quota); ``train_*`` the training side, ``eval_*`` the
# evaluation side (built in this order, each filtered as ``corpora_write`` says)
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
    # the evaluation side of the second claim (2026-12-04), looked at: now training
    "train_debian_reference": (
        lambda: _files(DEBIAN_REFERENCE, "*.en.html"),
        html_paragraphs,
        1500,
    ),
    "train_developers_reference": (
        lambda: _files(DEVELOPERS_REFERENCE, "*.rst.txt"),
        rst_paragraphs,
        1200,
    ),
    "train_git_doc": (lambda: _files(GIT_DOC, "*.txt"), adoc_paragraphs, 1500),
    "train_maint_guide": (
        lambda: _files(MAINT_GUIDE, "*.en.html"),
        html_paragraphs,
        800,
    ),
    "train_debian_handbook": (
        lambda: _files(HANDBOOK, "*.html"),
        html_paragraphs,
        1500,
    ),
    # the evaluation side of the third claim (2026-12-04)
    "eval_perl_faq": (
        lambda: _package_files(
            "perl-doc", r"/usr/share/perl/[\d.]+/pod/perlfaq\d\.pod$"
        ),
        pod_paragraphs,
        1500,
    ),
    "eval_postgresql_doc": (
        lambda: _package_files(
            "postgresql-doc-15", r"/usr/share/doc/postgresql-doc-15/html/[^/]+\.html$"
        ),
        html_paragraphs,
        1500,
    ),
    "eval_sqlite_doc": (
        lambda: _package_files("sqlite3-doc", r"/usr/share/doc/sqlite3/[^/]+\.html$"),
        html_paragraphs,
        1200,
    ),
    "eval_bash_reference": (
        lambda: _package_files("bash-doc", r"/usr/share/doc/bash/bashref\.html$"),
        html_paragraphs,
        1200,
    ),
    "eval_gnu_standards": (
        lambda: _package_files(
            "gnu-standards", r"/usr/share/doc/gnu-standards/(standards|maintain)\.html$"
        ),
        html_paragraphs,
        1200,
    ),
}
# The training side in the order its files joined it. A file that joined in a later
# round was built as evaluation, filtered against the rounds before it only, and keeps
# those texts.
TRAINING_ROUNDS: tuple[tuple[str, ...], ...] = (
    ("train_manpages", "train_python_library", "train_fortunes"),
    (
        "train_debian_faq",
        "train_python_tutorial",
        "train_python_faq",
        "train_fortunes_late",
    ),
    (
        "train_debian_reference",
        "train_developers_reference",
        "train_git_doc",
        "train_maint_guide",
        "train_debian_handbook",
    ),
)
EVALUATION = tuple(n for n in SOURCES if n.startswith("eval_"))
# A moved file keeps the sample it had under its first name (the seed names it).
SAMPLED_AS = {
    "train_debian_faq": "eval_debian_faq",
    "train_python_tutorial": "eval_python_tutorial",
    "train_python_faq": "eval_python_faq",
    "train_fortunes_late": "eval_fortunes",
    "train_debian_reference": "eval_debian_reference",
    "train_developers_reference": "eval_developers_reference",
    "train_git_doc": "eval_git_doc",
    "train_maint_guide": "eval_maint_guide",
    "train_debian_handbook": "eval_debian_handbook",
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


def corpora_write(out: Path) -> None:
    """Write one ``<name>.jsonl`` a source into ``out``. A training file is filtered
    against the texts of the rounds before its own (``TRAINING_ROUNDS``), an evaluation
    file against every training file and the evaluation files before it, so the two
    sides never share a text (the same fortune in two files, a sentence quoted twice).
    """
    written: set[str] = set()
    for names in (*TRAINING_ROUNDS, *((n,) for n in EVALUATION)):
        added: set[str] = set()
        for name in names:
            rows = [
                r for r in corpus_build(name) if str(r["text"]).lower() not in written
            ]
            added |= {str(r["text"]).lower() for r in rows}
            with (out / f"{name}.jsonl").open("w", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
            print(f"{name}: {len(rows)} texts")
        written |= added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--perturbed-only",
        action="store_true",
        help="rebuild only perturbed.jsonl from the evaluation files in --out and "
        "the everyday held-out set",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.perturbed_only:
        corpora_write(args.out)
    perturbed_write(args.out)


def perturbed_rows(out: Path, everyday: Path | None = None) -> list[dict[str, object]]:
    """Return the rows of ``perturbed.jsonl``: ``PERTURBED_FROM_CORPORA`` texts drawn
    from the evaluation files in ``out``, then every text of ``everyday`` (the everyday
    held-out set; ``safety.dataset.EVERYDAY_HELDOUT_SET`` when None), each with one
    piece of noise (:func:`safety.perturbation.perturbation_set`, seed
    ``PERTURBED_SEED``)."""
    from safety.dataset import EVERYDAY_HELDOUT_SET
    from safety.perturbation import perturbation_set

    texts = [
        json.loads(line)["text"]
        for name in sorted(EVALUATION)
        for line in (out / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    rows = perturbation_set(texts, seed=PERTURBED_SEED, size=PERTURBED_FROM_CORPORA)
    rows += perturbation_set(
        [
            json.loads(line)["text"]
            for line in (everyday or EVERYDAY_HELDOUT_SET)
            .read_text(encoding="utf-8")
            .splitlines()
            if line
        ],
        seed=PERTURBED_SEED,
    )
    return rows


def perturbed_write(out: Path) -> None:
    """Write ``perturbed.jsonl`` into ``out`` (:func:`perturbed_rows`)."""
    rows = perturbed_rows(out)
    with (out / "perturbed.jsonl").open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"perturbed: {len(rows)} texts")


if __name__ == "__main__":
    main()

"""Benign noise added to a text: the perturbation set of the moderation benchmark.

A verdict must not change because a message carries an id, a git hash, a UUID, an
order number, a URL, a file path or a short code snippet (issue 24: "Count to five
3f9a" was refused as fraud). :func:`perturb` adds one such piece before or after a
text, drawn from a ``random.Random`` the caller seeds, so the set is reproducible;
:func:`perturbation_set` builds it from a list of texts.
"""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Callable, Sequence

from safety.dataset import TAG_EVERYDAY, Example

TAG_PERTURBED = "perturbed"

_WORDS = ("build", "cache", "report", "notes", "data", "main", "app", "user", "tmp")
_HOSTS = ("example.com", "docs.example.org", "git.example.net", "intranet.local")
_SNIPPETS = (
    "x = {n}",
    "print({n})",
    "ls -la /var/log",
    "git checkout -b fix-{h}",
    "SELECT * FROM orders WHERE id = {n};",
    "for i in range({n}): pass",
    "curl -s https://api.example.com/v1/items/{n}",
    "docker run --rm -p 8080:80 nginx",
    "pip install requests=={v}",
    "chmod 644 config.yaml",
)


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _word(rng: random.Random) -> str:
    return rng.choice(_WORDS)


def _snippet(rng: random.Random) -> str:
    return rng.choice(_SNIPPETS).format(
        n=rng.randint(1, 9999),
        h=_hex(rng, 4),
        v=f"{rng.randint(1, 3)}.{rng.randint(0, 32)}.{rng.randint(0, 9)}",
    )


# kind -> a piece of noise drawn from the generator
KINDS: dict[str, Callable[[random.Random], str]] = {
    "hex": lambda r: _hex(r, r.choice((4, 6, 8))),
    "id": lambda r: f"{r.choice(('ID', 'ref', '#', 'ticket '))}{r.randint(10, 999999)}",
    "git_hash": lambda r: _hex(r, r.choice((7, 12, 40))),
    "uuid": lambda r: str(uuid.UUID(int=r.getrandbits(128), version=4)),
    "order": lambda r: (
        f"Order {r.choice(('#', 'no. ', ''))}"
        f"{''.join(r.choice(string.ascii_uppercase) for _ in range(2))}-"
        f"{r.randint(100000, 9999999)}"
    ),
    "url": lambda r: (
        f"https://{r.choice(_HOSTS)}/{_word(r)}/{r.randint(1, 99999)}"
        f"{r.choice(('', '?page=2', '#top', '.html'))}"
    ),
    "path": lambda r: r.choice(
        (
            f"/home/{_word(r)}/{_word(r)}_{r.randint(1, 99)}.txt",
            f"C:\\Users\\{_word(r)}\\{_word(r)}.docx",
            f"./src/{_word(r)}/{_word(r)}.py",
            f"/var/tmp/{_hex(r, 8)}.log",
        )
    ),
    "code": _snippet,
}


def perturb(text: str, rng: random.Random) -> tuple[str, str]:
    """Return (``text`` with one piece of noise added, the kind added): the piece goes
    before the text or after it (separated by a space, a newline or ": "), chosen by
    ``rng``."""
    kind = rng.choice(sorted(KINDS))
    piece = KINDS[kind](rng)
    if rng.random() < 0.5:
        return f"{piece}{rng.choice((' ', ': ', chr(10)))}{text}", kind
    return f"{text}{rng.choice((' ', ' -- ', chr(10)))}{piece}", kind


def perturbation_set(
    texts: Sequence[str], *, seed: int = 24, size: int | None = None
) -> list[dict[str, object]]:
    """Return rows ``{"text", "labels": [], "tags", "base"}`` for a seeded sample of
    ``size`` of ``texts`` (all when None), each perturbed once; ``base`` is the text
    before the noise, ``tags`` ``["perturbed", <kind>]``."""
    rng = random.Random(seed)
    chosen = list(texts) if size is None else rng.sample(list(texts), size)
    rows: list[dict[str, object]] = []
    for base in chosen:
        text, kind = perturb(base, rng)
        rows.append(
            {"text": text, "labels": [], "tags": [TAG_PERTURBED, kind], "base": base}
        )
    return rows


def examples_augment(examples: Sequence[Example], *, seed: int = 24) -> list[Example]:
    """Return one perturbed copy (:func:`perturb`) of each harmful and each everyday
    example of ``examples``, same labels and tags plus ``perturbed``: training rows
    that teach the classifier that an added id changes neither harm nor its absence
    (``manage.py moderation_train``)."""
    rng = random.Random(seed)
    out: list[Example] = []
    for example in examples:
        if example.labels or TAG_EVERYDAY in example.tags:
            text, _kind = perturb(example.text, rng)
            out.append(Example(text, example.labels, example.tags | {TAG_PERTURBED}))
    return out

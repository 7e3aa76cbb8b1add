"""The guard-model backend: a safety model (Llama Guard 3, or one answering in its
format such as ShieldGemma / Qwen3Guard adapters) served by our own inference tier.

The text is put into Llama Guard 3's task prompt with its hazard list (the prompt
format of the ``meta-llama/Llama-Guard-3-8B`` model card), sent as one generation
to the guard pool (``SAFETY_GUARD_POOL``: a chat pool whose workers run the guard on
vLLM), and the answer, ``safe`` or ``unsafe`` followed by a line of codes such as
``S1,S10``, is parsed into our categories through
:data:`safety.categories.HAZARD_CATEGORY`. With ``SAFETY_GUARD_FORMAT = "conversation"``
the user's text is sent alone and the model's own chat template builds the prompt
(how vLLM serves Llama Guard 3 with its Hugging Face template).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from django.conf import settings

from inference import client as inference_client
from inference import liveness
from safety.categories import HAZARD_CATEGORY, Category, Hazard
from safety.classifiers.base import Classifier, ModerationUnavailable, Verdict

# A guard answers yes/no: a flagged category scores 1, so any threshold in (0, 1] works.
GUARD_THRESHOLD = 0.5

_PROMPT = """Task: Check if there is unsafe content in 'User' messages in conversations according our safety policy with the below categories.

<BEGIN UNSAFE CONTENT CATEGORIES>
{categories}
<END UNSAFE CONTENT CATEGORIES>

<BEGIN CONVERSATION>

User: {text}

<END CONVERSATION>

Provide your safety assessment for ONLY THE LAST User message in the above conversation:
 - First line must read 'safe' or 'unsafe'.
 - If unsafe, a second line must include a comma-separated list of violated categories."""  # noqa: E501

_CODE = re.compile(r"^S\d{1,2}$")


def guard_prompt(text: str) -> str:
    """Return Llama Guard 3's task prompt judging ``text`` as the user's message."""
    categories = "\n".join(f"{h.value}: {h.label}." for h in Hazard)
    return _PROMPT.format(categories=categories, text=text)


def guard_parse(output: str) -> tuple[bool, tuple[str, ...]]:
    """Parse a guard's answer into ``(unsafe, hazard codes)``.

    Accepts ``safe``; ``unsafe`` then a line (or the rest of the first line) of
    comma-separated codes ``S1``..``S14``, any case and spacing. Raises ``ValueError``
    for anything else (empty, prose, ``unsafe`` without codes, a malformed code).
    """
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    if not lines:
        raise ValueError("empty guard answer")
    head, *rest = lines
    words = head.split(None, 1)
    verdict = words[0].lower().rstrip(".:")
    if verdict == "safe" and not rest and len(words) == 1:
        return False, ()
    if verdict != "unsafe":
        raise ValueError(f"unreadable guard answer: {output[:80]!r}")
    codes_text = " ".join(words[1:] + rest)
    codes = tuple(c.strip().upper() for c in codes_text.split(",") if c.strip())
    if not codes or not all(_CODE.match(c) for c in codes):
        raise ValueError(f"unsafe without readable categories: {output[:80]!r}")
    return True, tuple(dict.fromkeys(codes))


class GuardClassifier(Classifier):
    """Ask a guard model on our inference tier (see module docstring)."""

    name = "guard"

    def __init__(
        self,
        *,
        pool: str | None = None,
        timeout_s: float | None = None,
        prompt_format: str | None = None,
    ) -> None:
        self.pool = pool or settings.SAFETY_GUARD_POOL
        self.timeout_s = float(timeout_s or settings.SAFETY_TIMEOUT_S)
        self.prompt_format = prompt_format or settings.SAFETY_GUARD_FORMAT

    def _messages(self, text: str) -> list[dict[str, str]]:
        if self.prompt_format == "conversation":
            return [{"role": "user", "content": text}]
        return [{"role": "user", "content": guard_prompt(text)}]

    def classify(self, text: str, *, vector: Sequence[float] | None = None) -> Verdict:
        """Judge ``text`` with the guard (``vector`` is not used).

        Raises :class:`ModerationUnavailable` when the pool has no live worker, the
        guard does not answer within ``timeout_s`` seconds, or its answer is unreadable.
        """
        if liveness.workers_live(pool=self.pool) == 0:
            raise ModerationUnavailable(
                f"Content moderation is unavailable right now: no worker serves the "
                f"guard pool {self.pool!r}."
            )
        result = inference_client.generation_run(
            pool=self.pool,
            messages=self._messages(text),
            params={"max_tokens": 20, "temperature": 0},
            timeout_s=self.timeout_s,
        )
        if result.error_code:
            raise ModerationUnavailable(
                f"Content moderation is unavailable right now: the guard pool "
                f"{self.pool!r} failed ({result.error_code})."
            )
        try:
            _unsafe, codes = guard_parse(result.text)
        except ValueError as exc:
            raise ModerationUnavailable(
                f"Content moderation is unavailable right now: the guard model gave an "
                f"answer that could not be read ({exc})."
            ) from exc
        scores = {HAZARD_CATEGORY[c]: 1.0 for c in codes if c in HAZARD_CATEGORY}
        return Verdict.from_scores(
            scores,
            thresholds=dict.fromkeys(Category, GUARD_THRESHOLD),
            backend=self.name,
            hazards=tuple(c for c in codes if c not in HAZARD_CATEGORY),
            detail={"codes": list(codes)},
        )

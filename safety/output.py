"""Output moderation: classify the answer window by window while it streams.

:class:`OutputModerator` holds the rules; the gateway runs it as a stream policy
(:class:`gateway.generations.moderation.OutputModeration`; the layers forbid safety to
import the gateway) in the one follower of every generation and in settlement's
replay, so no surface can skip it. On while SAFETY_OUTPUT_ENABLED.

- Windows: whole sentences of at least :data:`WINDOW_MIN_CHARS` and at most
  SAFETY_OUTPUT_WINDOW_CHARS characters (the first at most
  SAFETY_OUTPUT_FIRST_WINDOW_CHARS) (characters, not tokens: the replay reads the
  stored text); the split depends only on the text, never on its deltas.
- Checks: each window with the one before it, by the configured backend, through the
  admin's per-category policies (``block`` cuts, ``flag`` records); with the
  embedded backend a block cuts only when the multilingual-e5 classifier flags the
  same category (SAFETY_OUTPUT_CONFIRM), else it flags; a window not judged English
  (:func:`safety.classifiers.multilingual.looks_english`) only flags.
- SAFETY_OUTPUT_MODE ``hold`` releases a window only once checked; ``release``
  streams at once and cuts after a violating window.
- Each window's decision is recorded in Redis
  (:func:`inference.keys.moderation_key`, first checker wins), so every reader
  cuts at the same place.
- A cut ends the answer ``content_filter``, records one :class:`ModerationEvent` with
  the whole generated text and does not count toward the user's abuse score.
  SAFETY_FAIL_CLOSED decides what a backend that is down does.

The rules and why they hold: docs/safety.md, "Output moderation".
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from chatsite.db import db_brief
from inference import keys
from inference.connections import redis_sync
from safety.categories import Category
from safety.classifiers import (
    ModerationUnavailable,
    classifier_get,
    unavailable_reason,
)
from safety.classifiers.multilingual import confirmed, looks_english
from safety.models import Action, ModerationEvent
from safety.selectors import safety_config
from safety.services import policy_matches

logger = logging.getLogger(__name__)

MODES = ("hold", "release")
# A sentence shorter than this (characters: "Sure.", "1.") joins the next one: it
# carries too little for the classifier and would cost one check for nothing.
WINDOW_MIN_CHARS = 20
_SENTENCE_END = ".!?"

PASS = "pass"
FLAG = "flag"
BLOCK = "block"
UNCHECKED = "unchecked"  # backend down, failing open: released unchecked
UNAVAILABLE = "unavailable"  # backend down, failing closed: cut

UNAVAILABLE_REASON = (
    "This answer was stopped: content moderation was unavailable, so the rest of it "
    "could not be checked. Please try again in a moment."
)


def cut_reason(category: Category | str) -> str:
    """The sentence shown under an answer cut for violating ``category``."""
    label = Category(category).label.lower()
    return f"This answer was stopped: it went against our content policy on {label}."


@dataclass(frozen=True)
class WindowDecision:
    """What output moderation decided for one window.

    ``action``: pass / flag / block / unchecked / unavailable (see the constants);
    ``category``/``score`` (0..1): the matched category, for flag and block;
    ``scores``: every category's score; ``backend``: who judged.
    """

    action: str
    category: str = ""
    score: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)
    backend: str = ""

    @property
    def cut(self) -> bool:
        """Whether this decision ends the answer."""
        return self.action in (BLOCK, UNAVAILABLE)

    @property
    def reason(self) -> str:
        """The sentence a user reads about a cut ("" when not a cut)."""
        if self.action == BLOCK:
            return cut_reason(self.category)
        if self.action == UNAVAILABLE:
            return UNAVAILABLE_REASON
        return ""

    def to_json(self) -> str:
        """The decision as stored in Redis."""
        return json.dumps(
            {
                "a": self.action,
                "c": self.category,
                "s": self.score,
                "scores": self.scores,
                "b": self.backend,
            }
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> WindowDecision:
        """Read a decision stored by :meth:`to_json`."""
        data = json.loads(raw)
        return cls(
            action=data["a"],
            category=data.get("c", ""),
            score=float(data.get("s", 0.0)),
            scores=data.get("scores") or {},
            backend=data.get("b", ""),
        )


def window_split(
    text: str, *, max_chars: int, final: bool, first_chars: int = 0
) -> list[str]:
    """Split ``text`` into its closed windows (see the module docstring), in order.

    The characters after the last window are still open (more text may extend them)
    unless ``final``, when they are the last window. ``max_chars`` >= 1 characters;
    ``first_chars`` (0: ``max_chars``) bounds the first window alone, so hold mode
    shows the opening words without waiting for the first sentence to end.
    The split of a prefix never changes when text is appended.
    """
    windows: list[str] = []
    start, i, n = 0, 0, len(text)
    while i < n:
        size = i + 1 - start
        limit = first_chars if first_chars and start == 0 else max_chars
        char = text[i]
        end = None
        if (
            not final
            and i + 1 == n
            and size >= WINDOW_MIN_CHARS
            and char in _SENTENCE_END
        ):
            # whether this ends a sentence depends on the next character: decide only
            # when it has arrived, as the whole text will (else a prefix could close
            # a window by size that the whole text closes later, at this sentence end)
            break
        if size >= WINDOW_MIN_CHARS and (
            char == "\n"
            or (char in _SENTENCE_END and i + 1 < n and text[i + 1].isspace())
        ):
            end = i + 1
        elif size >= limit:
            space = text.rfind(" ", start + limit // 2, i + 1)
            end = space + 1 if space > start else i + 1
        if end is not None:
            windows.append(text[start:end])
            start = i = end
            continue
        i += 1
    if final and start < n:
        windows.append(text[start:])
    return windows


def output_classify(text: str) -> WindowDecision:
    """Classify ``text`` (a window with its context) and apply the category policies.

    Sync (the embedded backend embeds on the inference tier over Redis). A backend
    that is down gives ``unavailable`` (cut) when SAFETY_FAIL_CLOSED, else
    ``unchecked`` (released; logged).
    """
    classifier = classifier_get()
    try:
        verdict = classifier.classify(text)
    except ModerationUnavailable as exc:
        if settings.SAFETY_FAIL_CLOSED:
            logger.warning(
                "output moderation unavailable (%s), cutting", unavailable_reason(exc)
            )
            return WindowDecision(UNAVAILABLE, backend=classifier.name)
        logger.warning(
            "output moderation unavailable (%s); failing open: the window is "
            "released unchecked",
            unavailable_reason(exc),
        )
        return WindowDecision(UNCHECKED, backend=classifier.name)
    scores = {c.value: round(float(s), 4) for c, s in verdict.scores.items()}
    matches = policy_matches(verdict, config=safety_config())
    if not matches:
        return WindowDecision(PASS, scores=scores, backend=verdict.backend)
    blocking = [m for m in matches if m.action == Action.BLOCK]
    if blocking and verdict.backend == "embedded" and not looks_english(text):
        # answers in other languages: 8 of 11 ordinary CJK ones cut (data/README.md)
        blocking = []
    if blocking and settings.SAFETY_OUTPUT_CONFIRM and verdict.backend == "embedded":
        second = confirmed(text, {m.category for m in blocking})
        blocking = [m for m in blocking if m.category in second]
    top = blocking[0] if blocking else matches[0]
    return WindowDecision(
        BLOCK if blocking else FLAG,
        category=top.category.value,
        score=round(float(top.score), 4),
        scores=scores,
        backend=verdict.backend,
    )


@dataclass(frozen=True)
class Step:
    """What the moderator releases after a delta: ``text`` may be shown now; ``cut``
    True ends the answer (nothing after ``text``); ``reason`` the user's sentence."""

    text: str
    cut: bool = False
    reason: str = ""


class OutputModerator:
    """Output moderation of one generation (see the module docstring): the stream
    policy protocol of :class:`gateway.generations.policy.StreamPolicy`, returning
    :class:`Step`. ``job_id`` keys its recorded decisions; ``user_id`` owns events."""

    def __init__(self, *, job_id: str, user_id: int) -> None:
        self.job_id = job_id
        self.user_id = user_id
        mode = settings.SAFETY_OUTPUT_MODE
        if mode not in MODES:
            raise ValueError(f"SAFETY_OUTPUT_MODE must be one of {MODES}, not {mode!r}")
        self.hold = mode == "hold"
        self.max_chars = max(1, int(settings.SAFETY_OUTPUT_WINDOW_CHARS))
        self.first_chars = max(0, int(settings.SAFETY_OUTPUT_FIRST_WINDOW_CHARS))
        self.buffer = ""  # the open window (hold: not released yet)
        self.previous = ""  # the last closed window: context for the next check
        self.decisions: list[WindowDecision] = []
        self.cut_by: WindowDecision | None = None

    @staticmethod
    def enabled() -> bool:
        """Whether output moderation is on (SAFETY_OUTPUT_ENABLED)."""
        return bool(settings.SAFETY_OUTPUT_ENABLED)

    # --- feeding: the windows closed by a delta are decided, then applied ----------

    def _closed(self, text: str, *, final: bool) -> list[str]:
        if self.cut_by is not None:
            return []
        return window_split(
            self.buffer + text,
            max_chars=self.max_chars,
            final=final,
            # the buffer starts the answer until its first window has closed
            first_chars=0 if self.decisions else self.first_chars,
        )

    def feed(self, text: str) -> Step:
        """Take ``text``; return what may be released (sync: settlement's replay)."""
        windows = self._closed(text, final=False)
        return self._apply(text, windows, self._decide_all(windows))

    def finish(self) -> Step:
        """The answer ended: the open rest is the last window (sync)."""
        windows = self._closed("", final=True)
        return self._apply("", windows, self._decide_all(windows))

    async def afeed(self, text: str) -> Step:
        """:meth:`feed` for the live follower: checks run in a thread, off the loop."""
        windows = self._closed(text, final=False)
        decisions = await db_brief(self._decide_all)(windows) if windows else []
        return self._apply(text, windows, decisions)

    async def afinish(self) -> Step:
        """:meth:`finish` for the live follower (see :meth:`afeed`)."""
        windows = self._closed("", final=True)
        decisions = await db_brief(self._decide_all)(windows) if windows else []
        return self._apply("", windows, decisions)

    def _decide_all(self, windows: list[str]) -> list[WindowDecision]:
        """Decide ``windows`` in order (their indexes follow the ones decided), up to
        and including the first cut."""
        decisions: list[WindowDecision] = []
        context = self.previous
        for offset, window in enumerate(windows):
            decision = self._decide(len(self.decisions) + offset, context, window)
            decisions.append(decision)
            if decision.cut:
                break
            context = window
        return decisions

    def _decide(self, index: int, context: str, window: str) -> WindowDecision:
        """The recorded decision of window ``index``, else classify it and record
        the decision (the first recorder wins)."""
        if not window.strip():
            return WindowDecision(PASS)
        client = redis_sync()
        key = keys.moderation_key(self.job_id)
        raw = client.hget(key, str(index))
        if raw is not None:
            return WindowDecision.from_json(raw)
        decision = output_classify((context + window).strip())
        if not client.hsetnx(key, str(index), decision.to_json()):
            raw = client.hget(key, str(index))
            if raw is not None:
                decision = WindowDecision.from_json(raw)
        client.expire(key, settings.INFERENCE_STREAM_TTL_S)
        return decision

    def _apply(
        self, text: str, windows: list[str], decisions: list[WindowDecision]
    ) -> Step:
        """Advance over the decided windows; return what is released now."""
        if self.cut_by is not None:
            return Step("", cut=True, reason=self.cut_by.reason)
        before = len(self.buffer)  # characters fed earlier and still open
        whole = self.buffer + text
        consumed, held_out = 0, ""
        for window, decision in zip(windows, decisions, strict=False):
            self.decisions.append(decision)
            if decision.cut:
                self.cut_by, self.buffer = decision, ""
                if self.hold:
                    return Step(held_out, cut=True, reason=decision.reason)
                # release: the text up to this window's end was (or is now) shown
                end = consumed + len(window)
                return Step(
                    whole[before:end] if end > before else "",
                    cut=True,
                    reason=decision.reason,
                )
            consumed += len(window)
            held_out += window
            self.previous = window
        self.buffer = whole[consumed:]
        return Step(held_out if self.hold else text)

    # --- settlement: record what was found -------------------------------------------

    def settled(self, *, generated: str, surface: str, message_id: Any) -> None:
        """Record one :class:`ModerationEvent` for the answer (the cut's category, or
        the highest-scoring flag) with the whole ``generated`` text, and count it in
        ``safety:output_moderation_total`` (after commit)."""
        decision = self.cut_by
        if decision is None:
            flags = [d for d in self.decisions if d.action == FLAG]
            decision = max(flags, key=lambda d: d.score) if flags else None
        if decision is None:
            return
        action, category = (
            ("cut", decision.category or UNAVAILABLE)
            if decision.cut
            else ("flag", decision.category)
        )
        if decision.action in (BLOCK, FLAG):
            ModerationEvent.objects.create(
                user_id=self.user_id,
                surface=surface or ModerationEvent.Surface.API,
                direction=ModerationEvent.Direction.OUTPUT,
                category=decision.category,
                score=decision.score,
                scores=decision.scores,
                action=(
                    ModerationEvent.EventAction.BLOCK
                    if decision.action == BLOCK
                    else ModerationEvent.EventAction.FLAG
                ),
                text=generated,
                message_id=message_id,
                job_id=self.job_id,
                backend=decision.backend,
            )
        logger.info(
            "output %s: user %s, job %s, %s (%.2f) on %s",
            action,
            self.user_id,
            self.job_id,
            category,
            decision.score,
            surface,
        )

        def count() -> None:
            from safety.metrics import OUTPUT_MODERATION

            OUTPUT_MODERATION.labels(action=action, category=category).inc()

        transaction.on_commit(count)

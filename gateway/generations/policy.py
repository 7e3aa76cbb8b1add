"""Stream policies: what may hold back, change or cut a generation's text in flight.

A policy sees the answer's text as it streams, in order, and decides what is
*released* to clients. It is deterministic over the text: fed the same characters
(in any split into deltas) it releases the same text and cuts at the same place. So
:func:`gateway.generations.follow.generation_follow` runs it live (a client sees only
released text) and settlement replays it over the whole stored text
(:func:`policy_replay`): what is stored is exactly what could have been shown, whoever
settles (the relay, the API, the reaper).

A policy that must wait on I/O to decide (output moderation classifies windows of
text on the inference tier) does it in :meth:`StreamPolicy.afeed`, which the live
follower awaits, so the event loop is never blocked; settlement's replay is sync
(:meth:`StreamPolicy.feed`). Such a policy stays deterministic by recording each
decision where every later replay reads it (:mod:`safety.output`).

Policies are configured by GATEWAY_STREAM_POLICIES (dotted paths of
:class:`StreamPolicy` subclasses, applied in order; those whose :meth:`active` is
False are skipped). Output moderation (:mod:`gateway.generations.moderation`) is
such a policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string


@dataclass
class Release:
    """A policy's decision on text fed to it: ``text`` may be shown now; ``cut`` True
    ends the answer here (nothing after ``text`` is ever released); ``reason`` is the
    sentence a user reads about a cut ("" : the generic one)."""

    text: str
    cut: bool = False
    reason: str = ""


class StreamPolicy:
    """Base policy: releases everything as it comes (subclass and override).

    ``job_id``/``user_id`` say whose generation it is (for audit records).
    """

    def __init__(self, *, job_id: str, user_id: int) -> None:
        self.job_id = job_id
        self.user_id = user_id

    @classmethod
    def active(cls) -> bool:
        """Whether the policy applies now (a setting may switch it off)."""
        return True

    def feed(self, text: str) -> Release:
        """Take the next ``text`` delta; return what may be released now."""
        return Release(text)

    def finish(self) -> Release:
        """The generation ended: return what was held back and may still be released."""
        return Release("")

    async def afeed(self, text: str) -> Release:
        """:meth:`feed` for the live follower; override when deciding needs I/O (it
        must then decide exactly as :meth:`feed` would)."""
        return self.feed(text)

    async def afinish(self) -> Release:
        """:meth:`finish` for the live follower (see :meth:`afeed`)."""
        return self.finish()

    def settled(self, *, generated: str, surface: str, message_id: Any) -> None:
        """The generation was settled after this policy saw all of it (sync, once, in
        the settling transaction): record what it found. ``generated`` is the whole
        text the engine wrote (released or not); ``surface`` chat / api."""


class PolicyChain:
    """The configured policies as one: each one's released text feeds the next."""

    def __init__(self, policies: list[StreamPolicy]) -> None:
        self.policies = policies
        self.cut = False
        self.reason = ""
        # characters of released text not passed on: the prefix of a continued answer
        self.hidden = 0

    def prime(self, prefix: str) -> None:
        """Feed ``prefix`` (the text of the answer a generation continues) first: the
        policies decide on the whole answer, and the released text of ``prefix`` is
        never passed on (a cut inside it cuts the continuation at its start)."""
        self.hidden += len(prefix)
        self.feed(prefix)

    async def aprime(self, prefix: str) -> None:
        """:meth:`prime` through each policy's :meth:`StreamPolicy.afeed`."""
        self.hidden += len(prefix)
        await self.afeed(prefix)

    def feed(self, text: str) -> Release:
        """Feed ``text`` through every policy in order; see :meth:`StreamPolicy.feed`."""
        if self.cut:
            return Release("", cut=True, reason=self.reason)
        cut, reason = False, ""
        for policy in self.policies:
            decision = policy.feed(text) if text else Release("")
            if cut and not decision.cut:  # a cut upstream: flush what is held
                decision = _joined(decision, policy.finish())
            text, cut, reason = _step(decision, cut, reason)
        return self._ended(text, cut, reason)

    def finish(self) -> Release:
        """Flush every policy in order; see :meth:`StreamPolicy.finish`."""
        if self.cut:
            return Release("", cut=True, reason=self.reason)
        text, cut, reason = "", False, ""
        for policy in self.policies:
            decision = policy.feed(text) if text else Release("")
            if not decision.cut:
                decision = _joined(decision, policy.finish())
            text, cut, reason = _step(decision, cut, reason)
        return self._ended(text, cut, reason)

    async def afeed(self, text: str) -> Release:
        """:meth:`feed` through each policy's :meth:`StreamPolicy.afeed`."""
        if self.cut:
            return Release("", cut=True, reason=self.reason)
        cut, reason = False, ""
        for policy in self.policies:
            decision = await policy.afeed(text) if text else Release("")
            if cut and not decision.cut:
                decision = _joined(decision, await policy.afinish())
            text, cut, reason = _step(decision, cut, reason)
        return self._ended(text, cut, reason)

    async def afinish(self) -> Release:
        """:meth:`finish` through each policy's :meth:`StreamPolicy.afinish`."""
        if self.cut:
            return Release("", cut=True, reason=self.reason)
        text, cut, reason = "", False, ""
        for policy in self.policies:
            decision = await policy.afeed(text) if text else Release("")
            if not decision.cut:
                decision = _joined(decision, await policy.afinish())
            text, cut, reason = _step(decision, cut, reason)
        return self._ended(text, cut, reason)

    def settled(self, *, generated: str, surface: str, message_id: Any) -> None:
        """Tell every policy the generation was settled (:meth:`StreamPolicy.settled`)."""
        for policy in self.policies:
            policy.settled(generated=generated, surface=surface, message_id=message_id)

    def _ended(self, text: str, cut: bool, reason: str) -> Release:
        self.cut, self.reason = cut, reason
        if self.hidden:  # released text of a primed prefix: not passed on
            skipped = min(self.hidden, len(text))
            text, self.hidden = text[skipped:], self.hidden - skipped
        return Release(text, cut, reason)


def _joined(first: Release, then: Release) -> Release:
    """``first`` followed by ``then`` (a flush after a feed)."""
    return Release(first.text + then.text, then.cut, then.reason)


def _step(decision: Release, cut: bool, reason: str) -> tuple[str, bool, str]:
    """The text passed on and the chain's cut state after one policy's ``decision``
    (the first cut's reason is kept)."""
    if decision.cut and not cut:
        return decision.text, True, decision.reason
    return decision.text, cut or decision.cut, reason


def policies_for(*, job_id: str, user_id: int) -> PolicyChain | None:
    """Return the configured, active policies for a generation, or None when none."""
    paths = getattr(settings, "GATEWAY_STREAM_POLICIES", [])
    classes = [import_string(path) for path in paths]
    policies = [cls(job_id=job_id, user_id=user_id) for cls in classes if cls.active()]
    return PolicyChain(policies) if policies else None


def chain_replay(chain: PolicyChain | None, text: str) -> Release:
    """Run ``chain`` over a whole answer ``text``; return what it releases.

    ``cut`` True: the answer was cut by a policy and only the returned text may be
    stored and billed as shown.
    """
    if chain is None:
        return Release(text)
    fed = chain.feed(text)
    if fed.cut:
        return fed
    tail = chain.finish()
    return Release(fed.text + tail.text, tail.cut, tail.reason)


def policy_replay(*, job_id: str, user_id: int, text: str) -> Release:
    """Run the configured policies over a whole answer; see :func:`chain_replay`."""
    return chain_replay(policies_for(job_id=job_id, user_id=user_id), text)

"""Stream policies: what may hold back, change or cut a generation's text in flight.

A policy sees the answer's text as it streams, in order, and decides what is
*released* to clients. It is deterministic over the text: fed the same characters
(in any split into deltas) it releases the same text and cuts at the same place. So
:func:`gateway.generations.follow.generation_follow` runs it live (a client sees only
released text) and settlement replays it over the whole stored text
(:func:`policy_replay`): what is stored is exactly what could have been shown, whoever
settles (the relay, the API, the reaper).

Policies are configured by GATEWAY_STREAM_POLICIES (dotted paths of
:class:`StreamPolicy` subclasses, applied in order; none by default). Output
moderation (hold-back window, release-then-cut) is such a policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.utils.module_loading import import_string


@dataclass
class Release:
    """A policy's decision on text fed to it: ``text`` may be shown now; ``cut`` True
    ends the answer here (nothing after ``text`` is ever released)."""

    text: str
    cut: bool = False


class StreamPolicy:
    """Base policy: releases everything as it comes (subclass and override).

    ``job_id``/``user_id`` say whose generation it is (for audit records).
    """

    def __init__(self, *, job_id: str, user_id: int) -> None:
        self.job_id = job_id
        self.user_id = user_id

    def feed(self, text: str) -> Release:
        """Take the next ``text`` delta; return what may be released now."""
        return Release(text)

    def finish(self) -> Release:
        """The generation ended: return what was held back and may still be released."""
        return Release("")


class PolicyChain:
    """The configured policies as one: each one's released text feeds the next."""

    def __init__(self, policies: list[StreamPolicy]) -> None:
        self.policies = policies
        self.cut = False

    def feed(self, text: str) -> Release:
        """Feed ``text`` through every policy in order; see :meth:`StreamPolicy.feed`."""
        return self._run(text, final=False)

    def finish(self) -> Release:
        """Flush every policy in order; see :meth:`StreamPolicy.finish`."""
        return self._run("", final=True)

    def _run(self, text: str, *, final: bool) -> Release:
        if self.cut:
            return Release("", cut=True)
        cut = False
        for policy in self.policies:
            decision = policy.feed(text) if text else Release("")
            # the stream ends here (its end, or a cut upstream): flush what is held
            if (final or cut) and not decision.cut:
                tail = policy.finish()
                decision = Release(decision.text + tail.text, tail.cut)
            text = decision.text
            cut = cut or decision.cut
        self.cut = cut
        return Release(text, cut)


def policies_for(*, job_id: str, user_id: int) -> PolicyChain | None:
    """Return the configured policies for a generation, or None when there are none."""
    paths = getattr(settings, "GATEWAY_STREAM_POLICIES", [])
    if not paths:
        return None
    return PolicyChain(
        [import_string(path)(job_id=job_id, user_id=user_id) for path in paths]
    )


def policy_replay(*, job_id: str, user_id: int, text: str) -> Release:
    """Run the configured policies over a whole answer; return what they release.

    ``cut`` True: the answer was cut by a policy and only the returned text may be
    stored and billed as shown.
    """
    chain = policies_for(job_id=job_id, user_id=user_id)
    if chain is None:
        return Release(text)
    fed = chain.feed(text)
    if fed.cut:
        return fed
    tail = chain.finish()
    return Release(fed.text + tail.text, tail.cut)

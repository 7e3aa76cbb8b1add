"""Output moderation as a stream policy: :class:`safety.output.OutputModerator` (the
rules: windows, checks, recorded decisions, events) run by the one follower of every
generation and by settlement's replay (:mod:`gateway.generations.policy`).

It is in GATEWAY_STREAM_POLICIES by default and active while SAFETY_OUTPUT_ENABLED.
"""

from __future__ import annotations

from typing import Any

from gateway.generations.policy import Release, StreamPolicy
from safety.output import OutputModerator, Step


def _release(step: Step) -> Release:
    return Release(step.text, step.cut, step.reason)


class OutputModeration(StreamPolicy):
    """The stream policy of :mod:`safety.output` (see there for modes and windows)."""

    def __init__(self, *, job_id: str, user_id: int) -> None:
        super().__init__(job_id=job_id, user_id=user_id)
        self.moderator = OutputModerator(job_id=job_id, user_id=user_id)

    @classmethod
    def active(cls) -> bool:
        """On while SAFETY_OUTPUT_ENABLED."""
        return OutputModerator.enabled()

    def feed(self, text: str) -> Release:
        """See :meth:`StreamPolicy.feed` (sync: classifies undecided windows here)."""
        return _release(self.moderator.feed(text))

    def finish(self) -> Release:
        """See :meth:`StreamPolicy.finish`."""
        return _release(self.moderator.finish())

    async def afeed(self, text: str) -> Release:
        """See :meth:`StreamPolicy.afeed` (checks run in a thread, off the loop)."""
        return _release(await self.moderator.afeed(text))

    async def afinish(self) -> Release:
        """See :meth:`StreamPolicy.afinish`."""
        return _release(await self.moderator.afinish())

    def settled(self, *, generated: str, surface: str, message_id: Any) -> None:
        """Record the answer's moderation event and metric (see
        :meth:`safety.output.OutputModerator.settled`)."""
        self.moderator.settled(
            generated=generated, surface=surface, message_id=message_id
        )

"""Stream policies (gateway/generations/policy.py): what a live follower releases is
what settlement's replay over the whole text releases, whatever the deltas."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.generations import policy


class HoldAndCut(policy.StreamPolicy):
    """Holds back a window of 4 characters and cuts where "bad" starts."""

    WINDOW = 4

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.held = ""

    def feed(self, text: str) -> policy.Release:
        self.held += text
        at = self.held.find("bad")
        if at >= 0:
            return policy.Release(self.held[:at], cut=True)
        cut = max(0, len(self.held) - self.WINDOW)
        released, self.held = self.held[:cut], self.held[cut:]
        return policy.Release(released)

    def finish(self) -> policy.Release:
        released, self.held = self.held, ""
        return policy.Release(released)


class Upper(policy.StreamPolicy):
    """Changes text: upper-cases it as it passes."""

    def feed(self, text: str) -> policy.Release:
        return policy.Release(text.upper())


def _live(deltas: list[str]) -> policy.Release:
    chain = policy.PolicyChain(
        [HoldAndCut(job_id="j", user_id=1), Upper(job_id="j", user_id=1)]
    )
    shown = ""
    for delta in deltas:
        decision = chain.feed(delta)
        shown += decision.text
        if decision.cut:
            return policy.Release(shown, cut=True)
    tail = chain.finish()
    return policy.Release(shown + tail.text, tail.cut)


@given(st.lists(st.text(alphabet="abdx ", max_size=6), max_size=12))
def test_live_release_equals_the_replay_over_the_whole_text(deltas):
    from django.test import override_settings

    paths = [f"{__name__}.HoldAndCut", f"{__name__}.Upper"]
    with override_settings(GATEWAY_STREAM_POLICIES=paths):
        replay = policy.policy_replay(job_id="j", user_id=1, text="".join(deltas))
    live = _live(deltas)
    assert live == replay
    whole = "".join(deltas)
    assert live.cut == ("bad" in whole)
    assert "BAD" not in live.text
    assert live.text == whole.split("bad")[0].upper()


def test_no_policies_configured_means_nothing_is_applied(settings):
    settings.GATEWAY_STREAM_POLICIES = []
    assert policy.policies_for(job_id="j", user_id=1) is None
    assert policy.policy_replay(job_id="j", user_id=1, text="bad") == policy.Release(
        "bad"
    )


def _chain() -> policy.PolicyChain:
    return policy.PolicyChain([HoldAndCut(job_id="j", user_id=1)])


@given(
    st.text(alphabet="abdx ", max_size=10),
    st.lists(st.text(alphabet="abdx ", max_size=6), max_size=8),
)
def test_a_primed_chain_screens_the_whole_answer_and_releases_only_the_new_text(
    prefix, deltas
):
    # a continued answer: the policies read the text before it first (a cut can
    # span the join), and only the continuation's own text is passed on
    whole = prefix + "".join(deltas)
    chain = _chain()
    chain.prime(prefix)
    shown, cut = "", False
    for delta in deltas:
        decision = chain.feed(delta)
        shown += decision.text
        if decision.cut:
            cut = True
            break
    if not cut:  # the end flushes the hold-back window: a cut may come only now
        end = chain.finish()
        shown += end.text
        cut = end.cut
    assert cut == ("bad" in whole)
    kept = whole.split("bad")[0]
    assert prefix + shown == kept if len(kept) >= len(prefix) else shown == ""
    replay = _chain()
    replay.prime(prefix)
    assert policy.chain_replay(replay, "".join(deltas)).text == shown

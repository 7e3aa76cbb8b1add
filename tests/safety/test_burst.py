"""A user is never suspended by the embedded classifier alone for messages a person
would call harmless: 100 benign messages carrying ids, codes and numbers, sent in a
burst from one account with the real embedded classifier (and a live embedding
worker), are all answered and suspend nobody."""

from __future__ import annotations

import random

import pytest

from chatsite.errors import ModerationBlocked
from conversations import services
from gateway.models import ModelPool
from safety import selectors, suspensions
from safety.models import ModerationEvent
from tests.conftest import fake_heartbeat
from tests.gateway import factories

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.slow,
    pytest.mark.usefixtures("pool_heartbeat", "moderation_on", "embedding_worker"),
]

TEMPLATES = [
    "Count to five {hex}",
    "Convert 0b{bits} to decimal.",
    "Summarise ticket #{num}",
    "What is the status of order {num}?",
    "Rename branch feature/{hex} to main",
    "Explain commit {hex}{hex} in one line.",
    "How many days until invoice {num} is due if it was sent today?",
    "Translate 'good morning' to Spanish ({hex})",
    "Sort these numbers: {num}, {small}, {small}",
    "Is {num} a prime number?",
]


def messages(count: int, seed: int = 24) -> list[str]:
    """``count`` benign messages, each with a random id, code or number in it."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        out.append(
            TEMPLATES[i % len(TEMPLATES)].format(
                hex=f"{rng.getrandbits(16):04x}",
                bits="".join(rng.choice("01") for _ in range(4)),
                num=rng.randint(10000, 99999),
                small=rng.randint(1, 99),
            )
        )
    return out


@pytest.fixture
def burst(user, settings) -> list[str]:
    """Send the 100 messages from ``user`` (new conversations; no worker answers, so
    the queue and the plan are made roomy enough for all); return the ones refused."""
    settings.GATEWAY_QUEUE_THRESHOLD = 1000
    ModelPool.objects.update(queue_threshold=1000)
    roomy = factories.plan(
        name="roomy",
        tokens_per_minute=10**9,
        tokens_per_day=10**9,
        monthly_token_budget=10**9,
    )
    factories.subscribe(user, roomy)
    refused = []
    for text in messages(100):
        fake_heartbeat()  # the default pool stays served throughout
        try:
            services.turn_start(user=user, content=text)
        except ModerationBlocked:
            refused.append(text)
    return refused


def test_a_burst_of_benign_id_bearing_messages_suspends_nobody(user, burst):
    assert selectors.suspension_active(user=user) is None
    assert suspensions.abuse_score(user=user) == 0
    assert not ModerationEvent.objects.filter(abuse=True).exists()
    # every borderline refusal said so
    assert all(not e.abuse for e in ModerationEvent.objects.filter(action="block"))


def test_a_burst_of_benign_id_bearing_messages_is_all_answered(burst):
    assert burst == []

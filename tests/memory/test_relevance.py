"""The relevance threshold of retrieval (MEMORY_RETRIEVE_MIN_SCORE, issue 11): measured
on the real embedding model (all-MiniLM-L6-v2, through the embedding worker), a
question about another topic injects no passage and shows no citation; a question
about the document still does.

The measurement (test_the_threshold_separates_related_from_unrelated_pairs) embeds
each question with each passage below: the pair of a question and its own topic's
passage is related, every other pair unrelated. The figures it prints are the ones in
memory.context.passage_max_distance's docstring.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from django.conf import settings

from conversations import services as chat_services
from inference.embeddings import embed_texts
from memory import services
from memory.context import turn_context
from memory.models import Citation

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedding_worker")]

# topic: (passage of a user's document, a question about it)
TOPICS = {
    "planets": (
        "Mars is the fourth planet from the Sun. Its red colour comes from iron oxide "
        "dust, and it has two small moons, Phobos and Deimos. Venus, the second "
        "planet, is hotter than Mercury because of its thick carbon dioxide clouds.",
        "Why is Venus hotter than Mercury?",
    ),
    "heron": (
        "Project Heron notes. The launch window opens on 14 March from the north pad. "
        "The budget owner is Dana Whitfield; the ground station is in Tromsø.",
        "When does the Project Heron launch window open?",
    ),
    "sourdough": (
        "Feed the sourdough starter twice a day with equal weights of flour and water. "
        "Bake the loaf at 250 °C for 20 minutes with steam, then 25 minutes without.",
        "How hot should the oven be for my sourdough loaf?",
    ),
    "lease": (
        "The tenant gives three months' notice in writing before moving out. The "
        "deposit of two monthly rents is returned within 30 days of the handover.",
        "How much notice do I have to give before leaving the flat?",
    ),
    "python": (
        "In Python, a list comprehension builds a new list from an iterable: "
        "[x * 2 for x in items if x > 0]. Generators use round brackets and are lazy.",
        "How do I write a list comprehension with a condition in Python?",
    ),
    "bees": (
        "Hive two swarmed in May; the colony now lives in the old apple tree. Check the "
        "varroa mite count in August and treat with oxalic acid in winter.",
        "When should I treat my bees against varroa mites?",
    ),
    "trains": (
        "The night train to Vienna leaves Munich at 23:15 from platform 11 and arrives "
        "at 7:40. Couchettes have six berths; sleepers two or three.",
        "What time does the night train from Munich arrive in Vienna?",
    ),
    "insurance": (
        "Your car insurance covers windscreen damage without an excess. Report a claim "
        "within seven days through the online form with photos of the damage.",
        "Is a cracked windscreen covered by my car insurance?",
    ),
}
# Questions on nothing any document above is about (each is paired with every passage).
STRANGERS = [
    "What is 100 plus 5?",
    "Tell me a joke about cats.",
    "Who painted the Mona Lisa?",
    "Translate 'good morning' into Spanish.",
    "Hi, how are you today?",
]


def similarities() -> tuple[list[float], list[float]]:
    """Cosine similarities of related and unrelated (question, passage) pairs."""
    names = list(TOPICS)
    passages = [TOPICS[n][0] for n in names]
    questions = [TOPICS[n][1] for n in names] + STRANGERS
    # a generous wait: the worker shares two cores with the rest of the suite
    vectors = np.array(embed_texts(passages + questions, timeout_s=120).vectors)
    p, q = vectors[: len(passages)], vectors[len(passages) :]
    scores = q @ p.T  # unit vectors: the dot product is the cosine similarity
    related, unrelated = [], []
    for i, j in itertools.product(range(len(questions)), range(len(passages))):
        (related if i == j else unrelated).append(float(scores[i, j]))
    return related, unrelated


def test_the_threshold_separates_related_from_unrelated_pairs():
    related, unrelated = similarities()
    threshold = settings.MEMORY_RETRIEVE_MIN_SCORE
    print(
        f"related n={len(related)} min={min(related):.3f} "
        f"median={np.median(related):.3f}; unrelated n={len(unrelated)} "
        f"max={max(unrelated):.3f} p95={np.percentile(unrelated, 95):.3f} "
        f"median={np.median(unrelated):.3f}; threshold={threshold}"
    )
    assert min(related) >= threshold + 0.1  # margins on both sides
    assert max(unrelated) <= threshold - 0.05


def upload(user, name, text):
    doc = services.document_upload(
        user=user, name=name, data=text.encode(), ingest_on_commit=False
    )
    return services.document_ingest(document_id=doc.id)


def context_for(user, question):
    return turn_context(
        user_id=user.pk,
        system_prompt="",
        history=[{"role": "user", "content": question}],
        max_tokens=64,
    )


def test_an_unrelated_question_injects_no_passage_a_related_one_does(user):
    upload(user, "planets.md", TOPICS["planets"][0])
    upload(user, "heron.md", TOPICS["heron"][0])
    assert context_for(user, "What is 100 plus 5?").passages == []
    built = context_for(user, "Why is Venus hotter than Mercury?")
    assert [p.title for p in built.passages] == ["planets.md"]


def test_an_unrelated_question_shows_no_citation_a_related_one_does(
    user, pool_heartbeat
):
    upload(user, "planets.md", TOPICS["planets"][0])
    turn = chat_services.turn_start(user=user, content="Tell me a joke about cats.")
    assert not Citation.objects.filter(message_id=turn.assistant_message.id).exists()
    turn = chat_services.turn_start(user=user, content="How many moons does Mars have?")
    cited = Citation.objects.filter(message_id=turn.assistant_message.id)
    assert [c.chunk.document.title for c in cited] == ["planets.md"]

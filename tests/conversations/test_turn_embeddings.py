"""A turn's embeddings come from the embedding pool, once per turn; without an
embedding worker the turn still answers, without memory, and says so."""

from __future__ import annotations

import pytest
from django.urls import reverse

from chatsite.errors import ServiceUnavailable
from conversations import services
from conversations.models import Message
from gateway import cache
from gateway import services as gateway_services
from inference import client as inference_client
from inference import embeddings
from memory import services as memory_services
from memory.models import Chunk, Document, MemoryFact

pytestmark = pytest.mark.django_db


def _unit(i: int) -> list[float]:
    row = [0.0] * embeddings.EMBEDDING_DIM
    row[i] = 1.0
    return row


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> list:
    """Chat jobs enqueued (spy on the real enqueue)."""
    seen: list = []
    original = inference_client.job_enqueue

    def spy(*, pool, job, **options):
        seen.append(job)
        return original(pool=pool, job=job, **options)

    monkeypatch.setattr(inference_client, "job_enqueue", spy)
    return seen


def test_without_an_embedding_worker_the_turn_answers_without_memory_and_says_so(
    user, auth_client, pool_heartbeat, jobs, django_capture_on_commit_callbacks
):
    MemoryFact.objects.create(user=user, text="I keep bees.", embedding=_unit(0))
    document = Document.objects.create(
        user=user, title="hives.md", text="Hive two swarmed.", status="ready"
    )
    Chunk.objects.create(
        document=document,
        user=user,
        ord=0,
        text="Hive two swarmed.",
        start_char=0,
        end_char=17,
        embedding=_unit(1),
    )
    with django_capture_on_commit_callbacks(execute=True):
        turn = services.turn_start(user=user, content="How are my bees doing?")
    answer = Message.objects.get(id=turn.assistant_message.id)
    assert answer.memory_unavailable is True
    prompt = " ".join(m["content"] for m in jobs[0].messages)
    assert "bees." not in prompt and "swarmed" not in prompt
    page = auth_client.get(reverse("conversation-detail", args=[turn.conversation.id]))
    assert "answered without memory and documents" in page.content.decode()


def test_a_turn_with_a_worker_uses_memory_and_is_not_marked(
    user, pool_heartbeat, jobs, embedding_worker, django_capture_on_commit_callbacks
):
    MemoryFact.objects.create(
        user=user, text="I keep bees.", embedding=embeddings.embed_text("I keep bees.")
    )
    with django_capture_on_commit_callbacks(execute=True):
        turn = services.turn_start(user=user, content="What do I keep in my garden?")
    assert Message.objects.get(id=turn.assistant_message.id).memory_unavailable is False
    assert "I keep bees." in jobs[0].messages[0]["content"]


def test_memory_and_the_semantic_cache_share_one_embedding_of_the_question(
    user,
    pool_heartbeat,
    jobs,
    embedding_worker,
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    # A fact far from the question: memory searches (it needs the vector) but injects
    # nothing, so the first single-turn prompt may also use the semantic cache.
    MemoryFact.objects.create(
        user=user,
        text="I drive a bus.",
        embedding=embeddings.embed_text("I drive a bus."),
    )
    gateway_services.user_preference_set(user=user, reuse_cached_answers=True)
    question = "What is the capital of France?"
    embedded: list[list[str]] = []
    original = embeddings.embed_texts

    def spy(texts, **options):
        embedded.append(list(texts))
        return original(texts, **options)

    monkeypatch.setattr(embeddings, "embed_texts", spy)
    prepared: list = []
    original_prepare = cache.cache_prepare

    def prepare_spy(**kwargs):
        material = original_prepare(**kwargs)
        prepared.append(material)
        return material

    monkeypatch.setattr(cache, "cache_prepare", prepare_spy)
    with django_capture_on_commit_callbacks(execute=True):
        services.turn_start(user=user, content=question)
    assert embedded == [[question]]  # one embedding, shared
    assert prepared and prepared[0].semantic and len(prepared[0].vector) == 384


def test_saving_a_fact_without_an_embedding_worker_says_why_and_stores_nothing(
    auth_client, user
):
    with pytest.raises(ServiceUnavailable) as caught:
        memory_services.fact_add(user=user, text="I keep bees.")
    assert caught.value.status == 503 and caught.value.retryable
    response = auth_client.post(
        reverse("fact-add"), {"text": "I keep bees."}, follow=True
    )
    assert "the embedding service is unavailable" in response.content.decode()
    assert not MemoryFact.objects.filter(user=user).exists()

"""Long-term facts: explicit add, extraction, retrieval per user, Memory page."""

import pytest
from django.urls import reverse

from conversations import services as chat_services
from inference import client as inference_client
from inference.embeddings import embed_text
from inference.engines.scripted import ScriptedEngine
from memory import selectors, services
from memory.context import MEMORY_OFF_NOTE, turn_context
from memory.models import MemoryFact
from memory.summary import facts_extract

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedding_worker")]

SYSTEM = "SYS"


def prompt_for(user, text):
    built = turn_context(
        user_id=user.pk,
        system_prompt=SYSTEM,
        history=[{"role": "user", "content": text}],
        max_tokens=64,
    )
    return built.messages[0]["content"], built


def test_remember_that_message_stores_a_fact_used_in_later_prompts(
    user, django_capture_on_commit_callbacks, pool_heartbeat
):
    with django_capture_on_commit_callbacks(execute=True):
        turn = chat_services.turn_start(
            user=user, content="Remember that my favourite tea is sencha."
        )
    fact = MemoryFact.objects.get(user=user)
    assert fact.text == "my favourite tea is sencha"
    assert fact.source_message_id == turn.user_message.id
    system, built = prompt_for(user, "Which tea should I buy?")
    assert "my favourite tea is sencha" in system
    assert built.facts == ["my favourite tea is sencha"]


def test_facts_of_one_user_never_reach_another_users_prompt(
    user, other_user, monkeypatch, django_capture_on_commit_callbacks, pool_heartbeat
):
    services.fact_add(user=other_user, text="My favourite tea is sencha.")
    services.fact_add(user=user, text="I am allergic to peanuts.")
    system, built = prompt_for(user, "What is my favourite tea?")
    assert "sencha" not in system
    assert all("sencha" not in f for f in built.facts)
    # and through a whole turn: the enqueued job holds only the user's own facts
    captured = {}
    original = inference_client.job_enqueue

    def spy(*, pool, job, **options):
        captured["job"] = job
        return original(pool=pool, job=job, **options)

    monkeypatch.setattr(inference_client, "job_enqueue", spy)
    with django_capture_on_commit_callbacks(execute=True):
        chat_services.turn_start(user=user, content="Tell me about my tea and food.")
    text = str(captured["job"].messages)
    assert "sencha" not in text
    assert "peanuts" in text


def test_similar_facts_are_merged_and_far_ones_are_not_retrieved(user):
    services.fact_add(user=user, text="My name is Ada Lovelace.")
    services.fact_add(user=user, text="My name is Ada Lovelace!")
    assert MemoryFact.objects.filter(user=user).count() == 1
    services.fact_add(user=user, text="I work as a marine biologist.")
    vector = embed_text("What is my job?")
    hits = selectors.facts_search(user=user, vector=vector, k=5, max_distance=0.8)
    assert hits[0][0].text == "I work as a marine biologist."


def test_memory_off_stores_and_uses_nothing(
    user, django_capture_on_commit_callbacks, pool_heartbeat
):
    services.fact_add(user=user, text="I live in Lisbon.")
    services.memory_enabled_set(user=user, enabled=False)
    assert services.fact_add(user=user, text="I have a cat.") is None
    with django_capture_on_commit_callbacks(execute=True):
        chat_services.turn_start(user=user, content="Remember that I drive a bus.")
    assert list(MemoryFact.objects.values_list("text", flat=True)) == [
        "I live in Lisbon."
    ]
    system, _ = prompt_for(user, "Where do I live?")
    assert "Lisbon" not in system


def test_memory_page_lists_edits_deletes_and_switches_off(auth_client, user):
    fact = services.fact_add(user=user, text="I like jazz.")
    page = auth_client.get(reverse("memory-page"))
    assert b"I like jazz." in page.content
    auth_client.post(reverse("fact-edit", args=[fact.id]), {"text": "I like blues."})
    fact.refresh_from_db()
    assert fact.text == "I like blues."
    response = auth_client.post(reverse("fact-edit", args=[fact.id]), {"text": "  "})
    assert "cannot be empty" in auth_client.get(response.url).content.decode()
    auth_client.post(reverse("fact-add"), {"text": "I run marathons."})
    assert MemoryFact.objects.filter(user=user).count() == 2
    auth_client.post(reverse("fact-delete", args=[fact.id]))
    assert not MemoryFact.objects.filter(id=fact.id).exists()
    auth_client.post(reverse("memory-toggle"), {"enabled": "0"})
    assert not selectors.memory_enabled(user=user)
    assert (
        b"Memory is <strong>off</strong>"
        in auth_client.get(reverse("memory-page")).content
    )


def test_another_users_fact_cannot_be_edited_or_deleted(auth_client, other_user):
    theirs = services.fact_add(user=other_user, text="Their secret.")
    assert auth_client.post(reverse("fact-delete", args=[theirs.id])).status_code == 404
    assert (
        auth_client.post(
            reverse("fact-edit", args=[theirs.id]), {"text": "x"}
        ).status_code
        == 404
    )
    theirs.refresh_from_db()
    assert theirs.text == "Their secret."


@pytest.mark.django_db(transaction=True)
def test_extraction_job_stores_the_facts_the_model_proposes(start_worker, user):
    start_worker(
        ScriptedEngine(
            text="- The user's name is Ada.\n- The user lives in Lisbon.\nNONE here"
        )
    )
    exchange = [
        {"role": "user", "content": "I'm Ada and I live in Lisbon."},
        {"role": "assistant", "content": "Nice to meet you, Ada!"},
    ]
    stored = facts_extract(
        user_id=user.pk, messages=exchange, pool="default", timeout_s=10
    )
    assert sorted(f.text for f in stored) == [
        "The user lives in Lisbon.",
        "The user's name is Ada.",
    ]
    # running it again merges duplicates instead of adding rows
    facts_extract(user_id=user.pk, messages=exchange, pool="default", timeout_s=10)
    assert MemoryFact.objects.filter(user=user).count() == 2


@pytest.mark.django_db(transaction=True)
def test_extraction_keeps_only_facts_that_name_something_the_user_wrote(
    start_worker, user
):
    start_worker(
        ScriptedEngine(
            text="- Banana\n- Apple\n- The user is called Ada.\n"
            "- The user is into gardening."
        )
    )
    exchange = [
        {"role": "user", "content": "I'm Ada, a gardener. Name three fruits."},
        {"role": "assistant", "content": "Banana, apple and cherry."},
    ]
    stored = facts_extract(
        user_id=user.pk, messages=exchange, pool="default", timeout_s=10
    )
    assert sorted(f.text for f in stored) == [
        "The user is called Ada.",
        "The user is into gardening.",
    ]


@pytest.mark.parametrize(
    ("said", "fact", "kept"),
    [
        ("我叫小明，住在上海。", "用户叫小明", True),
        ("我叫小明，住在上海。", "苹果", False),
        ("I drive a bus in Oslo.", "The user drives a bus.", True),
        ("List three fruits that are red.", "Strawberry", False),
    ],
)
def test_a_fact_is_grounded_in_the_users_words_in_any_script(said, fact, kept):
    from memory.summary import _content_words, _grounded

    assert _grounded(fact, _content_words(said)) is kept


@pytest.mark.parametrize(
    ("fact", "kept"),
    [
        ("The project lead is:", False),
        ("The project lead is", False),
        ("The user works on the", False),
        ("The user likes tea,", False),
        ("Ada", False),
        ("Ada Lovelace", False),
        ("Ada is vegan", True),
        ("The project lead is Ada.", True),
        ("用户叫小明", True),
    ],
)
def test_an_incomplete_fact_is_refused(fact, kept):
    from memory.summary import _complete

    assert _complete(fact) is kept


@pytest.mark.django_db(transaction=True)
def test_extraction_drops_a_fact_cut_off_after_its_colon(start_worker, user):
    start_worker(
        ScriptedEngine(text="- The project lead is:\n- The user leads a project.")
    )
    stored = facts_extract(
        user_id=user.pk,
        messages=[{"role": "user", "content": "Who is the project lead? I lead one."}],
        pool="default",
        timeout_s=10,
    )
    assert [f.text for f in stored] == ["The user leads a project."]


@pytest.mark.django_db(transaction=True)
def test_extraction_that_fails_stores_nothing(start_worker, user):
    start_worker(ScriptedEngine(text="- The user's name is Ada. more", fail_after=3))
    stored = facts_extract(
        user_id=user.pk,
        messages=[{"role": "user", "content": "I'm Ada."}],
        pool="default",
        timeout_s=10,
    )
    assert stored == [] and not MemoryFact.objects.exists()


def test_adding_a_fact_with_memory_off_says_memory_is_off_not_remembered(
    auth_client, user
):
    """With memory off the Memory page's "Remember" stores nothing, and says so: never
    "Remembered." for a fact that was not kept."""
    services.memory_enabled_set(user=user, enabled=False)
    response = auth_client.post(
        reverse("fact-add"), {"text": "I run marathons."}, follow=True
    )
    page = response.content.decode()
    assert "Memory is off, so nothing was remembered" in page
    assert "Remembered." not in page
    assert not MemoryFact.objects.exists()


@pytest.mark.parametrize("enabled", [False, True])
def test_remember_with_memory_off_tells_the_model_to_say_memory_is_off(user, enabled):
    """A "remember that ..." message while memory is off stores nothing, so the
    prompt tells the model to say memory is off, never "Remembered."; with memory on
    the note is absent."""
    services.memory_enabled_set(user=user, enabled=enabled)
    built = turn_context(
        user_id=user.id,
        system_prompt="You are helpful.",
        history=[{"role": "user", "content": "Remember that I like green tea."}],
        max_tokens=64,
    )
    system = built.messages[0]["content"]
    assert (MEMORY_OFF_NOTE in system) is not enabled

"""Titles, rolling summaries and citations in the chat (conversations/services/ hooks
into memory/): background generations run through the real worker (scripted engine)."""

import time

import pytest
from django.urls import reverse

from conversations import services, tasks
from conversations.models import Conversation, Message
from inference import client as inference_client
from inference.engines.scripted import ScriptedEngine
from inference.tokens import prompt_counter
from memory import services as memory_services
from memory import summary as memory_summary
from memory.models import Citation

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("embedding_worker"),
]


def finish_turn(turn, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        done = services.message_finalize(message_id=turn.assistant_message.id)
        if done:
            return done
        time.sleep(0.05)
    raise AssertionError("answer did not finish")


def conversation_with(user, n_turns, words=30):
    conversation = Conversation.objects.create(user=user, title="t")
    answer = None
    for i in range(n_turns):
        q = Message.objects.create(
            conversation=conversation,
            role="user",
            content=f"question {i} " + "blah " * words,
            parent=answer,  # a linear thread: each question follows the last answer
        )
        answer = Message.objects.create(
            conversation=conversation,
            role="assistant",
            parent=q,
            content=f"answer {i} " + "ok " * words,
        )
    conversation.current_leaf = answer
    conversation.save(update_fields=["current_leaf"])
    return conversation


# --- Titles -----------------------------------------------------------------------


def test_first_exchange_is_titled_by_the_model_in_the_background(
    start_worker, user, settings
):
    settings.CHAT_BACKGROUND_JOBS = True
    start_worker(ScriptedEngine(text="Green tea brewing"))
    turn = services.turn_start(user=user, content="How hot should water be for tea?")
    finish_turn(turn)
    conversation = Conversation.objects.get(id=turn.conversation.id)
    assert conversation.title == "Green tea brewing"


@pytest.mark.parametrize(
    "engine",
    [ScriptedEngine(text="a title that fails", fail_after=2), ScriptedEngine(text=" ")],
    ids=["generation-fails", "empty-title"],
)
def test_title_falls_back_to_the_truncated_first_message(
    start_worker, user, engine, settings
):
    settings.MEMORY_SMALL_POOL = "titles"
    settings.MEMORY_GENERATION_TIMEOUT_S = 10
    start_worker(ScriptedEngine(text="The answer."))
    first = "Plan a three-week trip through Japan with trains only " * 3
    turn = services.turn_start(user=user, content=first)
    finish_turn(turn)
    start_worker(engine, pool="titles")
    title = services.conversation_title_generate(conversation_id=turn.conversation.id)
    assert title == services.title_from_text(first)
    conversation = Conversation.objects.get(id=turn.conversation.id)
    assert conversation.title == services.title_from_text(first)
    assert conversation.title and len(conversation.title) <= 60


def test_title_falls_back_when_the_answer_failed_and_never_overwrites_a_rename(
    start_worker, user, settings
):
    settings.MEMORY_GENERATION_TIMEOUT_S = 1.0
    start_worker(ScriptedEngine(text="x", fail_after=0))
    turn = services.turn_start(user=user, content="   hello   there  ")
    answer = finish_turn(turn)
    assert answer.status == Message.Status.ERROR
    tasks.title_conversation(str(turn.conversation.id))
    assert Conversation.objects.get(id=turn.conversation.id).title == "hello there"
    services.conversation_rename(
        user=user, conversation_id=turn.conversation.id, title="Mine"
    )
    assert tasks.title_conversation(str(turn.conversation.id)) is None
    assert Conversation.objects.get(id=turn.conversation.id).title == "Mine"


def test_title_with_no_worker_times_out_and_falls_back(start_worker, user, settings):
    start_worker(ScriptedEngine(text="Answer."))
    turn = services.turn_start(user=user, content="What is a quasar?")
    finish_turn(turn)
    settings.MEMORY_SMALL_POOL = "nobody-serves-this"
    settings.MEMORY_GENERATION_TIMEOUT_S = 0.5
    tasks.title_conversation(str(turn.conversation.id))
    assert (
        Conversation.objects.get(id=turn.conversation.id).title == "What is a quasar?"
    )


# --- Rolling summary ----------------------------------------------------------------


@pytest.fixture
def summary_settings(settings):
    settings.MEMORY_SUMMARY_TRIGGER_TOKENS = 200
    settings.MEMORY_SUMMARY_KEEP_MESSAGES = 4
    settings.MEMORY_GENERATION_TIMEOUT_S = 10
    settings.MEMORY_SMALL_POOL = "small"
    return settings


def test_summary_covers_older_turns_and_the_next_prompt_uses_it(
    start_worker, user, summary_settings, monkeypatch
):
    start_worker(ScriptedEngine(text="SUMMARY-ONE: blah questions."), pool="small")
    conversation = conversation_with(user, 8)
    assert services.conversation_summarize(conversation_id=conversation.id)
    conversation.refresh_from_db()
    assert conversation.summary == "SUMMARY-ONE: blah questions."
    assert conversation.summary_upto.content.startswith("answer 5 ")
    # idempotent: nothing new to fold in
    assert not services.conversation_summarize(conversation_id=conversation.id)
    start_worker(ScriptedEngine(text="ok"))
    captured = {}
    original = inference_client.job_enqueue

    def spy(*, pool, job, **options):
        captured["job"] = job
        return original(pool=pool, job=job, **options)

    monkeypatch.setattr(inference_client, "job_enqueue", spy)
    services.turn_start(user=user, conversation_id=conversation.id, content="next")
    messages = captured["job"].messages
    assert "SUMMARY-ONE" in messages[0]["content"]
    assert messages[1]["content"].startswith("question 6 ")
    assert not any(m["content"].startswith("question 5 ") for m in messages)


@pytest.mark.parametrize(
    "engine",
    [
        ScriptedEngine(text="SUMMARY-TWO partial words here", fail_after=2),
        ScriptedEngine(text="SUMMARY-TWO going on ", cycle=True),  # cut at max_tokens
    ],
    ids=["fails", "cut-off"],
)
def test_failed_or_partial_summary_leaves_the_last_complete_one(
    start_worker, user, summary_settings, engine
):
    conversation = conversation_with(user, 8)
    first = start_worker(ScriptedEngine(text="SUMMARY-ONE."), pool="small")
    assert services.conversation_summarize(conversation_id=conversation.id)
    first.stop()
    conversation.refresh_from_db()
    upto = conversation.summary_upto_id
    answer = conversation.current_leaf
    for i in range(8, 14):  # more history past the threshold, on the same branch
        q = Message.objects.create(
            conversation=conversation,
            role="user",
            content=f"question {i} " + "x " * 30,
            parent=answer,
        )
        answer = Message.objects.create(
            conversation=conversation, role="assistant", parent=q, content="ok " * 30
        )
    conversation.current_leaf = answer
    conversation.save(update_fields=["current_leaf"])
    start_worker(engine, pool="small")
    assert not services.conversation_summarize(conversation_id=conversation.id)
    conversation.refresh_from_db()
    assert conversation.summary == "SUMMARY-ONE."
    assert conversation.summary_upto_id == upto


def test_a_history_longer_than_the_context_is_summarised_in_rounds_that_fit(
    start_worker, user, summary_settings, monkeypatch
):
    """The newcomer trial's imported 24-message conversation was never summarised:
    its one summary job held more than the context, and the engine refused it."""
    summary_settings.MEMORY_CONTEXT_TOKENS = 900
    start_worker(ScriptedEngine(text="SUMMARY-ROUND."), pool="small")
    conversation = conversation_with(user, 12)
    jobs = []
    original = inference_client.job_enqueue

    def spy(*, pool, job, **options):
        jobs.append(job)
        return original(pool=pool, job=job, **options)

    monkeypatch.setattr(inference_client, "job_enqueue", spy)
    count = prompt_counter(summary_settings.MEMORY_TOKENIZER_ENGINE)
    older = [
        {"role": m.role, "content": m.content}
        for m in conversation.messages.order_by("created_at")
    ][:-4]
    prompt = memory_summary.summary_prompt(previous="", messages=older)
    assert count(prompt) + memory_summary.SUMMARY_MAX_TOKENS > 900  # one job overflows

    assert services.conversation_summarize(conversation_id=conversation.id)
    assert len(jobs) >= 2
    for job in jobs:
        assert count(job.messages) + job.params["max_tokens"] <= 900
    # each round rolls the last one's summary forward, oldest messages first
    assert "question 0 " in jobs[0].messages[1]["content"]
    assert "Current summary:\nSUMMARY-ROUND." in jobs[1].messages[1]["content"]
    conversation.refresh_from_db()
    assert conversation.summary == "SUMMARY-ROUND."
    assert conversation.summary_upto.content.startswith("answer 9 ")
    transcript = "".join(job.messages[1]["content"] for job in jobs)
    assert all(f"question {i} " in transcript for i in range(10))


def test_a_message_longer_than_the_context_on_its_own_is_cut_to_fit():
    def count(messages):  # one token per word
        return sum(len(m["content"].split()) for m in messages)

    messages = [
        {"role": "user", "content": "word " * 500},
        {"role": "assistant", "content": "ok"},
    ]
    prompt, covered = memory_summary.summary_fit(
        previous="", messages=messages, count=count, limit=100
    )
    assert covered == 1 and 90 <= count(prompt) <= 100
    assert prompt[1]["content"].endswith(memory_summary.CUT_MARK)
    # a round ends on an answer when one fits, so the verbatim turns start with a user's
    messages = [{"role": r, "content": "x " * 20} for r in ["user", "assistant"] * 3]
    _prompt, covered = memory_summary.summary_fit(
        previous="", messages=messages, count=count, limit=90
    )
    assert covered == 2


# --- Citations ----------------------------------------------------------------------


def test_answer_that_used_passages_shows_numbered_citations(
    start_worker, auth_client, user
):
    doc = memory_services.document_upload(
        user=user,
        name="heron.md",
        data=b"Project Heron launches on 14 March from the north pad.",
        ingest_on_commit=False,
    )
    memory_services.document_ingest(document_id=doc.id)
    start_worker(ScriptedEngine(text="It launches on 14 March [1]."))
    turn = services.turn_start(user=user, content="When does Project Heron launch?")
    finish_turn(turn)
    citation = Citation.objects.get(message=turn.assistant_message)
    assert citation.number == 1 and citation.chunk.document_id == doc.id
    page = auth_client.get(reverse("conversation-detail", args=[turn.conversation.id]))
    html = page.content.decode()
    link = reverse("document-detail", args=[doc.id]) + "#p0"
    assert f'href="{link}"' in html and "[1] heron.md" in html
    services.conversation_delete(user=user, conversation_id=turn.conversation.id)
    assert not Citation.objects.exists()


def test_the_streamed_done_frame_carries_the_citations(start_worker, auth_client, user):
    import asyncio

    from tests.sse import asgi_sse, session_cookie

    doc = memory_services.document_upload(
        user=user,
        name="heron.md",
        data=b"Project Heron launches on 14 March from the north pad.",
        ingest_on_commit=False,
    )
    memory_services.document_ingest(document_id=doc.id)
    start_worker(ScriptedEngine(text="It launches on 14 March [1]."))
    turn = services.turn_start(user=user, content="When does Project Heron launch?")
    url = reverse(
        "message-stream", args=[turn.conversation.id, turn.assistant_message.id]
    )
    result = asyncio.run(asgi_sse(url, cookie=session_cookie(auth_client)))
    done = result.last("done")
    assert done.data["citations"] == [
        {
            "number": 1,
            "title": "heron.md",
            "passage": 1,
            "url": reverse("document-detail", args=[doc.id]) + "#p0",
        }
    ]

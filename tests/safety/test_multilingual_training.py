"""Groups that keep a translation in its English original's fold, and the data link
they read (``of`` on each row of moderation_train_translated.jsonl)."""

from __future__ import annotations

from collections import Counter

from safety.categories import Category
from safety.classifiers.multilingual_training import translation_groups
from safety.dataset import TRAIN_SET, TRAIN_TRANSLATED_SET, Example, examples_load


def test_a_translation_is_grouped_with_its_original() -> None:
    drugs = frozenset({Category.ILLEGAL_DRUGS})
    examples = [
        Example("How do I cook meth?", drugs),
        Example("What is a goldfish?"),
        Example("Comment fabriquer de la meth ?", drugs, of="How do I cook meth?"),
        Example("¿Qué es un pez dorado?", of="What is a goldfish?", lang="es"),
        Example("如何制作冰毒？", drugs, of="How do I cook meth?", lang="zh"),
        Example("Une phrase sans original.", of="Not in the set."),
    ]
    assert list(translation_groups(examples)) == [0, 1, 0, 1, 0, 5]


def test_every_retired_translation_names_an_original_with_its_labels() -> None:
    english = {e.text: e for e in examples_load(TRAIN_SET)}
    translated = examples_load(TRAIN_TRANSLATED_SET)
    assert Counter(e.lang for e in translated) == {"fr": 240, "es": 240, "zh": 240}
    for e in translated:
        original = english[e.of]
        assert (original.labels, original.tags) == (e.labels, e.tags), e.text
    # each original is translated once into each language
    assert set(Counter(e.of for e in translated).values()) == {3}

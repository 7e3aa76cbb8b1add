"""The taxonomy: every category documented and every mapping lands on a category."""

from __future__ import annotations

from safety.categories import (
    CATEGORIES,
    HAZARD_CATEGORY,
    OPENAI_CATEGORY,
    Category,
    Hazard,
    category_info,
)


def test_every_category_has_a_description_and_advice_for_users() -> None:
    assert set(CATEGORIES) == set(Category)
    for category in Category:
        info = category_info(category.value)
        assert info.description and info.user_advice
        assert all(h in Hazard.values for h in info.hazards)


def test_llama_guard_hazards_map_onto_our_categories() -> None:
    assert set(HAZARD_CATEGORY) <= set(Hazard.values)
    assert HAZARD_CATEGORY["S11"] is Category.SELF_HARM
    assert HAZARD_CATEGORY["S4"] is Category.SEXUAL_MINORS
    # Specialized advice, IP, adult sexual content and elections are not ours.
    assert not {"S6", "S8", "S12", "S13"} & set(HAZARD_CATEGORY)


def test_openai_names_map_onto_our_categories_but_not_distress() -> None:
    assert OPENAI_CATEGORY["sexual/minors"] is Category.SEXUAL_MINORS
    assert OPENAI_CATEGORY["self-harm/instructions"] is Category.SELF_HARM
    assert "self-harm/intent" not in OPENAI_CATEGORY

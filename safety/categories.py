"""The moderation taxonomy: our categories, the hazards they come from, and their names
in other systems.

Sources:

- The MLCommons hazard taxonomy as Llama Guard 3 uses it (model card of
  ``meta-llama/Llama-Guard-3-8B``, "Hazard Taxonomy and Policy": S1 Violent Crimes ... S14
  Code Interpreter Abuse), itself after the MLCommons AI Safety taxonomy; the later
  MLCommons AILuminate v1.0 benchmark keeps the same hazards (violent crimes, sex-related
  crimes, child sexual exploitation, suicide & self-harm, indiscriminate weapons (CBRNE),
  hate, non-violent crimes, defamation, privacy, intellectual property, specialized
  advice, sexual content).
- OpenAI's moderation categories (``/v1/moderations``, ``omni-moderation-latest``):
  ``harassment``, ``harassment/threatening``, ``hate``, ``hate/threatening``,
  ``illicit``, ``illicit/violent``, ``self-harm``, ``self-harm/intent``,
  ``self-harm/instructions``, ``sexual``, ``sexual/minors``, ``violence``,
  ``violence/graphic``.

Our ten categories are what an operator sets thresholds and actions on. Nine
are hazards of the taxonomy above, split finer where the taxonomy lumps things that an
operator treats differently (S2 "non-violent crimes" holds drugs, malware and fraud);
``prompt_injection`` is not a content hazard at all (no MLCommons or OpenAI category): it
is an attack on the assistant's instructions (OWASP LLM01 "Prompt Injection").

Every category here is about *requests for harm* (how to do it, do it for me, praise it),
not about a topic: history, medicine, security teaching, fiction and news on the same
subjects are allowed, and the labelled set (``safety/data/``) says so with examples.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


class Category(models.TextChoices):
    """Our moderation categories (stored as these values by moderation records)."""

    VIOLENCE = "violence", "Violence"
    SELF_HARM = "self_harm", "Self-harm"
    SEXUAL_MINORS = "sexual_minors", "Sexual content involving minors"
    HATE = "hate", "Hate"
    HARASSMENT = "harassment", "Harassment"
    WEAPONS = "weapons", "Weapons"
    ILLEGAL_DRUGS = "illegal_drugs", "Illegal drugs"
    MALWARE = "malware", "Malware and cyberattacks"
    FRAUD = "fraud", "Fraud and scams"
    PROMPT_INJECTION = "prompt_injection", "Prompt injection / jailbreak"


class Hazard(models.TextChoices):
    """Llama Guard 3's hazard codes (its model card, after the MLCommons taxonomy)."""

    S1 = "S1", "Violent Crimes"
    S2 = "S2", "Non-Violent Crimes"
    S3 = "S3", "Sex-Related Crimes"
    S4 = "S4", "Child Sexual Exploitation"
    S5 = "S5", "Defamation"
    S6 = "S6", "Specialized Advice"
    S7 = "S7", "Privacy"
    S8 = "S8", "Intellectual Property"
    S9 = "S9", "Indiscriminate Weapons"
    S10 = "S10", "Hate"
    S11 = "S11", "Suicide & Self-Harm"
    S12 = "S12", "Sexual Content"
    S13 = "S13", "Elections"
    S14 = "S14", "Code Interpreter Abuse"


@dataclass(frozen=True)
class CategoryInfo:
    """What a category covers and how it maps to the public taxonomies.

    ``hazards``: the Llama Guard 3 codes it draws from; ``openai``: the OpenAI moderation
    category names it corresponds to ("" where OpenAI has none); ``description``: what
    it covers (for staff); ``user_advice``: one line for the user whose input was
    blocked, saying what they can do instead.
    """

    category: Category
    hazards: tuple[str, ...]
    openai: tuple[str, ...]
    description: str
    user_advice: str


CATEGORIES: dict[Category, CategoryInfo] = {
    info.category: info
    for info in (
        CategoryInfo(
            Category.VIOLENCE,
            hazards=("S1", "S3"),
            openai=("violence", "illicit/violent"),
            description="Help planning, committing or glorifying violence against "
            "people or animals (assault, murder, kidnapping, terrorism, sexual assault).",
            user_advice="Questions about history, news, self-defence or fiction are "
            "fine: say what you want to understand, not how to hurt someone.",
        ),
        CategoryInfo(
            Category.SELF_HARM,
            hazards=("S11",),
            openai=("self-harm/instructions", "self-harm"),
            description="Methods, encouragement or instructions for suicide, "
            "self-injury or disordered eating.",
            user_advice="If you are struggling, you can talk about it here or reach a "
            "crisis line (in many countries, call or text your local emergency number); "
            "you are not alone.",
        ),
        CategoryInfo(
            Category.SEXUAL_MINORS,
            hazards=("S4",),
            openai=("sexual/minors",),
            description="Any sexual content involving minors, or help grooming or "
            "exploiting a child.",
            user_advice="This is never allowed. Questions about protecting children "
            "from abuse are welcome.",
        ),
        CategoryInfo(
            Category.HATE,
            hazards=("S10",),
            openai=("hate", "hate/threatening"),
            description="Content that demeans or dehumanises people for a protected "
            "characteristic (race, religion, gender, disability, orientation...).",
            user_advice="Discussing discrimination, its history or how to counter it "
            "is fine; content attacking a group is not.",
        ),
        CategoryInfo(
            Category.HARASSMENT,
            hazards=("S5", "S7"),
            openai=("harassment", "harassment/threatening"),
            description="Bullying, threatening, stalking, doxxing or defaming a "
            "specific person.",
            user_advice="You can ask for help handling a conflict or writing a firm, "
            "respectful message instead.",
        ),
        CategoryInfo(
            Category.WEAPONS,
            hazards=("S9",),
            openai=("illicit/violent",),
            description="Making or acquiring weapons illegally: explosives, chemical, "
            "biological, nuclear or radiological weapons, untraceable or converted guns.",
            user_advice="Questions about history, legal hunting or sport shooting, or "
            "safety are fine; instructions to build weapons are not.",
        ),
        CategoryInfo(
            Category.ILLEGAL_DRUGS,
            hazards=("S2",),
            openai=("illicit",),
            description="Making, buying, selling or smuggling illegal drugs.",
            user_advice="Questions about medicines, addiction, treatment or harm "
            "reduction are welcome.",
        ),
        CategoryInfo(
            Category.MALWARE,
            hazards=("S2", "S14"),
            openai=("illicit",),
            description="Writing malware, breaking into systems or accounts you do not "
            "own, or abusing a code interpreter.",
            user_advice="Security learning, defence and testing your own systems are "
            "fine: say what you are protecting.",
        ),
        CategoryInfo(
            Category.FRAUD,
            hazards=("S2",),
            openai=("illicit",),
            description="Scams, phishing, forgery, identity theft, money laundering "
            "and other deception for gain.",
            user_advice="You can ask how to recognise or report a scam, or how to "
            "protect yourself.",
        ),
        CategoryInfo(
            Category.PROMPT_INJECTION,
            hazards=(),
            openai=(),
            description="Attempts to override the assistant's instructions, reveal its "
            "system prompt or switch off its rules (jailbreaks).",
            user_advice="Ask your question directly; the assistant's rules cannot be "
            "switched off.",
        ),
    )
}

# Llama Guard 3's hazard codes -> our category. S6 (specialized advice), S8
# (intellectual property), S12 (adult sexual content) and S13 (elections) are not among
# our categories: a guard that reports only those is recorded, not flagged. S2 covers
# drugs, malware and fraud alike; fraud is its most common case (the Llama Guard 3 model
# card lists "fraud, scams" first), so a bare S2 is reported as fraud.
HAZARD_CATEGORY: dict[str, Category] = {
    "S1": Category.VIOLENCE,
    "S2": Category.FRAUD,
    "S3": Category.VIOLENCE,
    "S4": Category.SEXUAL_MINORS,
    "S5": Category.HARASSMENT,
    "S7": Category.HARASSMENT,
    "S9": Category.WEAPONS,
    "S10": Category.HATE,
    "S11": Category.SELF_HARM,
    "S14": Category.MALWARE,
}

# OpenAI moderation category names -> our category, for the remote backend. ``illicit``
# (non-violent wrongdoing) is reported as fraud for the same reason as S2 above.
# ``self-harm`` and ``self-harm/intent`` also fire on a person saying they are in
# distress, which we never block (see safety/data/README.md); only requests for methods
# (``self-harm/instructions``) count as self_harm. Unmapped names are recorded, not flagged.
OPENAI_CATEGORY: dict[str, Category] = {
    "violence": Category.VIOLENCE,
    "violence/graphic": Category.VIOLENCE,
    "illicit/violent": Category.WEAPONS,
    "self-harm/instructions": Category.SELF_HARM,
    "sexual/minors": Category.SEXUAL_MINORS,
    "hate": Category.HATE,
    "hate/threatening": Category.HATE,
    "harassment": Category.HARASSMENT,
    "harassment/threatening": Category.HARASSMENT,
    "illicit": Category.FRAUD,
}


def category_info(category: Category | str) -> CategoryInfo:
    """Return the :class:`CategoryInfo` of ``category`` (a Category or its value).

    Raises ``ValueError`` for an unknown value.
    """
    return CATEGORIES[Category(category)]

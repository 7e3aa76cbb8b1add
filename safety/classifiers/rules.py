"""Rules where rules are the right tool: fixed phrasings of prompt injection.

Jailbreak templates and "ignore previous instructions" are short, stereotyped strings
that attackers copy verbatim; a pattern catches them exactly and explains itself, where
an embedding only sees "a message about instructions". Patterns after the phrasings
catalogued by OWASP LLM01 (Prompt Injection) and the public jailbreak prompt
collections (DAN, STAN, AIM, "developer mode").
"""

from __future__ import annotations

import re

_INSTRUCTIONS = (
    r"(?:instructions?|rules|guidelines|directives|prompts?|polic(?:y|ies)|programming)"
)

INJECTION_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        # ignore / disregard / forget (all) (the) previous|prior|above instructions
        rf"\b(?:ignore|disregard|forget|override|bypass)\b[^.\n]{{0,40}}?"
        rf"\b(?:previous|prior|above|earlier|preceding|initial|original|your|all)\b"
        rf"[^.\n]{{0,20}}?\b{_INSTRUCTIONS}",
        # reveal / print / repeat your system prompt
        r"\b(?:reveal|print|show|repeat|output|quote|tell me|leak|write)\b[^.\n]{0,40}?"
        r"\b(?:your\s+(?:system|hidden|secret|initial|original)|hidden|secret|"
        r"confidential)\s+(?:prompt|message|instructions?)",
        # named jailbreak personas and modes
        r"\b(?:DAN|STAN|AIM)\b[^.\n]{0,40}\b(?:do anything now|strive to avoid norms|"
        r"machiavellian|no (?:restrictions|limits|filters|moral))",
        r"\bdo anything now\b",
        r"\b(?:you are|you're|act as|become)\s+(?:now\s+)?(?-i:DAN|STAN|AIM)\b",
        r"\b(?:developer|jailbreak|jailbroken|god|unfiltered|unrestricted)\s+mode\b",
        # "you have no rules / restrictions / filters now"
        r"\b(?:without|no|free of|freed from)\s+(?:any\s+)?(?:restrictions|filters|"
        r"content polic(?:y|ies)|safety (?:rules|guidelines|layer|training)|ethics|"
        r"moral guidelines)\b[^.\n]{0,60}?\b(?:from now on|anymore|stay in character|"
        r"confirm|answer|respond)",
        r"\b(?:content filter|safety (?:layer|filter))\b[^.\n]{0,30}\b(?:disabled|off|"
        r"removed|revoked)\b",
        # fake role markers injected into user text or documents
        r"</?\s*system\s*>",
        r"^\s*system\s*:",
    )
)


def injection_match(text: str) -> str | None:
    """Return the first prompt-injection phrase found in ``text``, or None."""
    for pattern in INJECTION_PATTERNS:
        found = pattern.search(text)
        if found:
            return found.group(0)
    return None


# Direct attempts, which a user's own message is refused for (the patterns above only
# flag): narrower, so that a user correcting themselves ("forget the previous
# instructions, make it shorter") or asking about their phone's developer mode is not
# refused. Orders aimed at the assistant's own instructions, requests for its system
# prompt, the named personas and the jailbreak modes switched on for the assistant.
_DEVICE = (
    r"android|iphone|ios|phone|chrome|firefox|edge|browser|windows|mac|linux|xbox|"
    r"playstation|ps[45]|switch|console|tesla|car|router|tv|app|extension|vs ?code|"
    r"minecraft|game|settings|bios|device|tablet|pixel|samsung|xiaomi|huawei"
)
DIRECT_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(?:ignore|disregard|forget|override|bypass)\b[^.\n]{0,12}?"
        r"\b(?:all|any|every|your)\b[^.\n]{0,24}?\b(?:instructions|rules|guidelines|"
        r"directives|programming|polic(?:y|ies)|restrictions|guardrails|prompts?)\b",
        r"\b(?:reveal|print|show|repeat|output|quote|tell me|leak|write|display|dump|"
        r"give me)\b[^.\n]{0,30}?\byour\s+(?:full\s+|entire\s+|exact\s+)?(?:system|"
        r"hidden|secret|initial|original|internal)\s+(?:prompt|message|instructions?)",
        r"\b(?:you are|you're|act as|become)\s+(?:now\s+)?(?-i:DAN|STAN|AIM)\b",
        r"\bdo anything now\b",
        rf"\b(?:enter|enable|activate|switch (?:to|into)|turn on|you are (?:now )?in|"
        rf"you're (?:now )?in|stay in)\s+(?:the\s+)?(?:developer|jailbreak|jailbroken|god|"
        rf"unfiltered|unrestricted|DAN)\s+mode\b(?![^.\n]{{0,40}}\b(?:{_DEVICE})\b)",
        INJECTION_PATTERNS[6].pattern,
        INJECTION_PATTERNS[7].pattern,
    )
)

_MODE_PATTERN = 4
_QUESTION = re.compile(r"\b(?:how|where|why|what|can i|should i|do i)\b", re.I)

# A text *about* prompt injection: the phrase quoted, or a word naming the attack next
# to a word asking to understand or defend against it ("what is prompt injection",
# "how do I detect jailbreak attempts like ..."). Such a text is still flagged by a rule
# match; it is not refused (:func:`injection_direct`).
_QUOTES = "\"'`\u2018\u2019\u201c\u201d\u00ab\u00bb"
_TOPIC = re.compile(
    r"\b(?:injections?|jailbreak(?:s|ing)?|attacks?|attackers?)\b", re.I
)
_ABOUT = re.compile(
    r"\b(?:what (?:is|are|does|do)|explain|meaning|means|defen[cd]\w*|protect\w*|"
    r"prevent\w*|detect\w*|mitigat\w*|guard against|block\w*|filter\w*|"
    r"examples?|e\.g\.|for instance|such as|like this|recogni[sz]\w*|research\w*|"
    r"classif\w*|test(?:ing)? (?:my|our))\b",
    re.I,
)


def _quoted(text: str, start: int, end: int) -> bool:
    before = text[max(0, start - 3) : start]
    after = text[end : end + 80]
    return any(q in before for q in _QUOTES) and any(
        q in after or q in text[start:end] for q in _QUOTES
    )


def injection_direct(text: str) -> str | None:
    """Return the phrase of ``text`` that makes it a direct prompt-injection attempt
    (a :data:`DIRECT_PATTERNS` match, not quoted, in a text that is not about prompt
    injection: no word naming the attack with one asking to understand or defend
    against it); None otherwise. Source of the distinction: OWASP LLM01 separates the
    attack from its discussion; a question about injection must be answerable."""
    if _TOPIC.search(text) and _ABOUT.search(text):
        return None
    for index, pattern in enumerate(DIRECT_PATTERNS):
        for found in pattern.finditer(text):
            if _quoted(text, found.start(), found.end()):
                continue
            if index == _MODE_PATTERN and _QUESTION.search(text[: found.start()]):
                continue  # "how do I enable developer mode?" asks about a setting
            return found.group(0)
    return None

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

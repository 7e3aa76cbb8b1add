"""Writes of evaluation sets: parse a JSONL file of cases and import it as an
:class:`~evaluation.models.EvalSet`, all or nothing (a bad line imports nothing
and is named in the error).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from chatsite.errors import (
    Conflict,
    InvalidInput,
)
from evaluation import checks
from evaluation.models import EvalCase, EvalSet

logger = logging.getLogger(__name__)

# Most errors listed when a JSONL file is refused (the rest are counted).
IMPORT_MAX_ERRORS_SHOWN = 10


@dataclass
class CaseSpec:
    """A validated case of a JSONL file (see :func:`eval_cases_parse`)."""

    name: str
    category: str
    messages: list[dict[str, str]]
    system_prompt: str
    checks: list[dict[str, Any]]
    params: dict[str, Any]
    judge_pool: str
    rubric: str


def _case_parse(data: Any, index: int) -> CaseSpec:
    if not isinstance(data, dict):
        raise ValueError("a case must be a JSON object")
    name = data.get("name") or f"case-{index}"
    if not isinstance(name, str) or len(name) > 100:
        raise ValueError("`name` must be text of at most 100 characters")
    messages = data.get("messages")
    if messages is None and isinstance(data.get("prompt"), str):
        messages = [{"role": "user", "content": data["prompt"]}]
    if not isinstance(messages, list) or not messages:
        raise ValueError("needs `prompt` (text) or `messages` (a list of messages)")
    for message in messages:
        if (
            not isinstance(message, dict)
            or message.get("role") not in ("system", "user", "assistant")
            or not isinstance(message.get("content"), str)
        ):
            raise ValueError(
                'each message must be {"role": "user"|"assistant"|"system", '
                '"content": "..."}'
            )
    if messages[-1]["role"] != "user" or not messages[-1]["content"].strip():
        raise ValueError("the last message must be a non-empty user message")
    system = data.get("system", data.get("system_prompt", "")) or ""
    if not isinstance(system, str):
        raise ValueError("`system` must be text")
    raw_checks = data.get("checks", [])
    if not isinstance(raw_checks, list) or not raw_checks:
        raise ValueError("`checks` must be a non-empty list")
    try:
        case_checks = [checks.check_validate(c) for c in raw_checks]
    except checks.CheckError as exc:
        raise ValueError(str(exc)) from exc
    params = data.get("params", {}) or {}
    if not isinstance(params, dict):
        raise ValueError("`params` must be an object")
    judge_pool = data.get("judge_pool", "") or ""
    rubric = data.get("rubric", "") or ""
    if not isinstance(judge_pool, str) or not isinstance(rubric, str):
        raise ValueError("`judge_pool` and `rubric` must be text")
    has_judge = any(c["type"] == "judge" for c in case_checks)
    if has_judge and not (judge_pool and rubric):
        raise ValueError("a judge check needs `judge_pool` and `rubric`")
    category = data.get("category", "") or ""
    if not isinstance(category, str):
        raise ValueError("`category` must be text")
    return CaseSpec(
        name=name,
        category=category[:50],
        messages=[{"role": m["role"], "content": m["content"]} for m in messages],
        system_prompt=system,
        checks=case_checks,
        params=params,
        judge_pool=judge_pool,
        rubric=rubric,
    )


def eval_cases_parse(lines: Iterable[str]) -> list[CaseSpec]:
    """Parse JSONL text, one case per line (blank lines and ``#`` lines skipped).

    A case: ``{"name", "prompt" | "messages", "system"?, "checks": [...],
    "params"?, "category"?, "judge_pool"?, "rubric"?}``. Raises InvalidInput listing
    the bad lines by number (at most IMPORT_MAX_ERRORS_SHOWN) when any is bad, or
    when names repeat or there is no case at all.
    """
    specs: list[CaseSpec] = []
    errors: list[str] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            spec = _case_parse(json.loads(text), len(specs) + 1)
        except ValueError as exc:  # json.JSONDecodeError is one
            errors.append(f"line {number}: {exc}")
            continue
        if spec.name in seen:
            errors.append(f"line {number}: the name {spec.name!r} is used twice")
            continue
        seen.add(spec.name)
        specs.append(spec)
    if errors:
        shown = "; ".join(errors[:IMPORT_MAX_ERRORS_SHOWN])
        more = len(errors) - IMPORT_MAX_ERRORS_SHOWN
        raise InvalidInput(
            f"Nothing was imported: {len(errors)} bad line(s): {shown}"
            + (f" (and {more} more)" if more > 0 else ""),
            code="invalid_eval_set",
        )
    if not specs:
        raise InvalidInput("Nothing was imported: the file holds no case.")
    return specs


def eval_set_import(
    *, name: str, lines: Iterable[str], description: str = "", replace: bool = False
) -> tuple[EvalSet, int]:
    """Create the set ``name`` from JSONL ``lines``; return it and its case count.

    All or nothing: a bad file raises InvalidInput (see :func:`eval_cases_parse`) and
    stores nothing. An existing set raises Conflict unless ``replace``: then its cases
    are updated by name and new ones added (cases missing from the file are kept, with
    their results).
    """
    name = (name or "").strip()
    if not name:
        raise InvalidInput("The set needs a name.")
    specs = eval_cases_parse(lines)
    with transaction.atomic():
        eval_set, created = EvalSet.objects.get_or_create(
            name=name, defaults={"description": description}
        )
        if not created and not replace:
            raise Conflict(
                f"The eval set {name!r} exists already (import with replace to "
                "update its cases)."
            )
        if description and not created:
            EvalSet.objects.filter(pk=eval_set.pk).update(description=description)
        for ordinal, spec in enumerate(specs):
            EvalCase.objects.update_or_create(
                eval_set=eval_set,
                name=spec.name,
                defaults={
                    "ordinal": ordinal,
                    "category": spec.category,
                    "messages": spec.messages,
                    "system_prompt": spec.system_prompt,
                    "checks": spec.checks,
                    "params": spec.params,
                    "judge_pool": spec.judge_pool,
                    "rubric": spec.rubric,
                },
            )
    return eval_set, len(specs)

"""Tool steps of an answer: their shapes, checks and how the page shows them.

An answer that uses tools is a chain of messages (see :class:`conversations.models.
Message`): an assistant message carrying ``tool_calls``, then one ``tool`` message per
call, then the next assistant message. This module holds what the services, the
prompt, the page, the export and the import share, and reads or writes nothing:

- :class:`ToolCall` / :class:`ToolOutput`: what the tool loop hands to
  :mod:`conversations.services.tool_steps` (a call as the model generated it; a tool's
  result with the page's label and flags);
- :func:`calls_clean` / :func:`detail_clean`: the one check of stored shapes (services
  and import); :func:`openai_tool_calls`: the calls in OpenAI's chat format;
- :class:`ToolStep`: one call and its result as the page shows it (a collapsed block,
  ``templates/chat/_tool_step.html``, rendered by
  :func:`conversations.rendering.tool_step_html`).

Stored call: ``{"id": "call_…", "name": str, "arguments": str}``, ``arguments`` the
JSON text exactly as the model generated it (byte for byte, never re-serialised: the
prompt sends it back unchanged). Stored detail of a result: ``{"label": str,
"truncated": bool, "error": bool}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chatsite.storable import text_problem

# Longest stored call id, tool name and label, in characters (the model fields').
CALL_ID_MAX_CHARS = 100
NAME_MAX_CHARS = 200
LABEL_MAX_CHARS = 200
# Most calls one assistant message may carry (a model asks for a handful at most).
CALLS_MAX = 64
DETAIL_KEYS = {"label", "truncated", "error"}


class ToolStepProblem(ValueError):
    """A tool call or result that does not have the stored shape; ``str()`` says why
    in a sentence for the user (the caller adds where)."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the model generated it.

    ``id``: the call's id (``call_…``, at most 100 characters); ``name``: the tool's
    name; ``arguments``: the JSON text of the arguments exactly as generated (``"{}"``
    for a tool without parameters).
    """

    id: str
    name: str
    arguments: str

    def stored(self) -> dict[str, str]:
        """Return the call as stored in ``Message.tool_calls``."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class ToolOutput:
    """A tool's result for one call, to store as a ``tool`` message.

    ``content``: the result text the model reads (quoted as data in prompts), already
    bounded by the tool (``truncated`` True when the tool cut it); ``label``: what the
    page's block says ("Ran Python", "Searched the web for “…”"; empty: a default from
    the tool's name and arguments, :func:`label_default`); ``error``: the tool failed
    and ``content`` says how.
    """

    tool_call_id: str
    content: str
    label: str = ""
    truncated: bool = False
    error: bool = False


def _text(value: Any, what: str, limit: int, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise ToolStepProblem(f"`{what}` must be a string.")
    if not value and not empty:
        raise ToolStepProblem(f"`{what}` cannot be empty.")
    problem = text_problem(value)
    if problem:
        raise ToolStepProblem(f"`{what}` {problem}.")
    if len(value) > limit:
        raise ToolStepProblem(f"`{what}` is longer than {limit:,} characters.")
    return value


def calls_clean(value: Any, *, arguments_max_chars: int) -> list[dict[str, str]]:
    """Return ``value``, a list of calls (dicts or :class:`ToolCall`), as stored calls.

    Each call needs a non-empty ``id`` (at most CALL_ID_MAX_CHARS characters, unique
    in the list) and ``name`` (at most NAME_MAX_CHARS), and ``arguments``, a string of
    at most ``arguments_max_chars`` characters, kept exactly (not parsed: a model's
    malformed JSON is stored as it came); no other keys. Raises
    :class:`ToolStepProblem` on anything else, an empty list, or more than CALLS_MAX.
    """
    if not isinstance(value, list | tuple):
        raise ToolStepProblem("`tool_calls` must be a list.")
    if not value:
        raise ToolStepProblem("`tool_calls` cannot be an empty list.")
    if len(value) > CALLS_MAX:
        raise ToolStepProblem(f"`tool_calls` holds more than {CALLS_MAX} calls.")
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for n, raw in enumerate(value, 1):
        call = raw.stored() if isinstance(raw, ToolCall) else raw
        if not isinstance(call, dict) or set(call) != {"id", "name", "arguments"}:
            raise ToolStepProblem(
                f"tool call {n} must be an object with exactly `id`, `name` and "
                "`arguments`."
            )
        call_id = _text(call["id"], "id", CALL_ID_MAX_CHARS)
        if call_id in seen:
            raise ToolStepProblem(f"the tool call id {call_id[:40]!r} appears twice.")
        seen.add(call_id)
        out.append(
            {
                "id": call_id,
                "name": _text(call["name"], "name", NAME_MAX_CHARS),
                "arguments": _text(
                    call["arguments"], "arguments", arguments_max_chars, empty=True
                ),
            }
        )
    return out


def detail_clean(value: Any) -> dict[str, Any]:
    """Return a result's page detail ``{"label", "truncated", "error"}`` from
    ``value`` (a dict with any of those keys; missing: "", False, False). Raises
    :class:`ToolStepProblem` on another key or type, or a label over
    LABEL_MAX_CHARS characters."""
    if not isinstance(value, dict):
        raise ToolStepProblem("`tool_detail` must be an object.")
    extra = set(value) - DETAIL_KEYS
    if extra:
        raise ToolStepProblem(
            f"`tool_detail` has an unknown key {sorted(extra)[0][:40]!r} "
            "(allowed: label, truncated, error)."
        )
    for flag in ("truncated", "error"):
        if not isinstance(value.get(flag, False), bool):
            raise ToolStepProblem(f"`tool_detail.{flag}` must be true or false.")
    return {
        "label": _text(value.get("label", ""), "label", LABEL_MAX_CHARS, empty=True),
        "truncated": value.get("truncated", False),
        "error": value.get("error", False),
    }


def openai_tool_calls(calls: Sequence[dict[str, str]]) -> list[dict[str, Any]]:
    """Return stored calls as OpenAI chat ``tool_calls``: ``[{"id", "type":
    "function", "function": {"name", "arguments"}}]``, arguments unchanged."""
    return [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for c in calls
    ]


def arguments_parse(arguments: str) -> dict[str, Any] | None:
    """Return the arguments' JSON object, or None when they are not one."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _quoted(value: Any, limit: int = 80) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# The built-in tools' default labels (tools/: the registry's tools may give their
# own): a function of the parsed arguments ({} when they are not a JSON object).
_LABELS: dict[str, Callable[[dict[str, Any]], str]] = {
    "run_python": lambda a: "Ran Python",
    "web_search": lambda a: (
        f"Searched the web for “{_quoted(a['query'])}”"
        if a.get("query")
        else "Searched the web"
    ),
    "fetch_url": lambda a: (
        f"Read {_quoted(a['url'])}" if a.get("url") else "Read a page"
    ),
    "search_documents": lambda a: (
        f"Searched your documents for “{_quoted(a['query'])}”"
        if a.get("query")
        else "Searched your documents"
    ),
}


def label_default(name: str, arguments: str) -> str:
    """Return the block's label when the tool gave none: the built-in tools' own
    ("Ran Python", "Searched the web for “…”", "Read <url>"), else "Used <name>";
    at most LABEL_MAX_CHARS characters."""
    rule = _LABELS.get(name)
    label = rule(arguments_parse(arguments) or {}) if rule else f"Used {name}"
    return label[:LABEL_MAX_CHARS]


@dataclass(frozen=True)
class ArgumentView:
    """One argument as the page shows it: its name and value as text; ``block``
    when the value is long or spans lines (code: shown in ``<pre>``)."""

    name: str
    value: str
    block: bool


@dataclass
class ToolStep:
    """One tool call of an answer's chain and its result, as the page shows them.

    ``message``: the assistant message that made the call; ``index``: the call's
    0-based position in its ``tool_calls``; ``result``: the ``tool`` message (None when
    no result was stored: the chain stopped, or the tool still runs when ``running``).
    """

    message: Any  # conversations.models.Message (no model import in this module)
    index: int
    result: Any = None
    running: bool = False
    arguments_view: list[ArgumentView] = field(init=False)

    def __post_init__(self) -> None:
        """Parse the call's arguments for the page once."""
        parsed = arguments_parse(self.call["arguments"])
        views: list[ArgumentView] = []
        if parsed is not None:
            for key, value in parsed.items():
                text = (
                    value
                    if isinstance(value, str)
                    else json.dumps(value, ensure_ascii=False, indent=2)
                )
                views.append(
                    ArgumentView(
                        name=str(key), value=text, block="\n" in text or len(text) > 80
                    )
                )
        self.arguments_view = views

    @property
    def call(self) -> dict[str, str]:
        """The stored call (``{"id", "name", "arguments"}``)."""
        calls: list[dict[str, str]] = self.message.tool_calls
        return calls[self.index]

    @property
    def dom_id(self) -> str:
        """The block's element id, the same live and after a reload:
        ``step-<assistant message id>-<call index>``."""
        return f"step-{self.message.id}-{self.index}"

    @property
    def detail(self) -> dict[str, Any]:
        """The result's page detail (defaults when there is no result)."""
        stored = self.result.tool_detail if self.result is not None else {}
        return {"label": "", "truncated": False, "error": False, **(stored or {})}

    @property
    def label(self) -> str:
        """The block's summary: the stored label, or :func:`label_default`."""
        return str(self.detail["label"]) or label_default(
            self.call["name"], self.call["arguments"]
        )

    @property
    def state(self) -> str:
        """ "running", "error", "done" or "missing" (no result stored, not running)."""
        if self.result is None:
            return "running" if self.running else "missing"
        return "error" if self.detail["error"] else "done"

"""Which tools a user is offered (reads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tools.builtin import builtin_offered
from tools.mcp import mcp_tools
from tools.models import ToolPreference, ToolSwitch
from tools.registry import Tool, openai_tools, registered_tools

__all__ = [
    "ToolOffer",
    "tool_choices",
    "tool_menu",
    "tools_available",
    "tools_permitted",
]


@dataclass(frozen=True)
class ToolOffer:
    """The tools to offer the model for one turn, and notes about tools that could
    not be offered (an MCP server down) for the user and the logs."""

    tools: list[Tool]
    notes: list[str]

    def openai(self) -> list[dict[str, Any]]:
        """Return OpenAI's ``tools`` request parameter for the offered tools."""
        return openai_tools(self.tools)

    def get(self, name: str) -> Tool | None:
        """Return the offered tool ``name``, or None (the model named another)."""
        return next((t for t in self.tools if t.name == name), None)


async def tools_permitted(*, plan: str) -> ToolOffer:
    """Return every tool staff allow for users of the plan named ``plan`` ("" for
    none): the registered built-ins that are configured (``web_search`` needs
    TOOLS_SEARCH_URL), ``search_documents`` where wired, and the enabled MCP servers'
    tools, less the tools switched off for everyone or for ``plan``."""
    switches = {s.tool: s async for s in ToolSwitch.objects.all()}
    listing = await mcp_tools()
    candidates = [t for t in registered_tools() if builtin_offered(t.name)]
    candidates += listing.tools

    def allowed(tool: Tool) -> bool:
        switch = switches.get(tool.name)
        return switch is None or (switch.enabled and plan not in switch.plans_off())

    return ToolOffer(tools=[t for t in candidates if allowed(t)], notes=listing.notes)


async def tool_choices(*, user_id: int) -> set[str]:
    """Return the names of the tools the user turned off."""
    pref = await ToolPreference.objects.filter(user_id=user_id).afirst()
    return set(pref.disabled) if pref is not None else set()


async def tools_available(*, user_id: int, plan: str) -> ToolOffer:
    """Return the tools to offer ``user_id`` (of the plan named ``plan``) in a turn:
    :func:`tools_permitted` less the ones the user turned off."""
    offer = await tools_permitted(plan=plan)
    off = await tool_choices(user_id=user_id)
    return ToolOffer(
        tools=[t for t in offer.tools if t.name not in off], notes=offer.notes
    )


async def tool_menu(*, user_id: int, plan: str) -> list[tuple[Tool, bool]]:
    """Return the composer's list: each tool staff allow for ``plan``, by name, with
    whether the user has it on."""
    offer = await tools_permitted(plan=plan)
    off = await tool_choices(user_id=user_id)
    return [(t, t.name not in off) for t in sorted(offer.tools, key=lambda t: t.name)]

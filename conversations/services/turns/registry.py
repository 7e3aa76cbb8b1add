"""The tool registry's tools as the chat's tool loop runs them: the default
CHAT_TOOLS_PROVIDER (:func:`registry_tools`).

The offer is :func:`tools.selectors.tools_available` (staff switches, the plan, the
user's choice); a run is :func:`tools.registry.tool_run` (argument validation, the
tool's wall-clock limit, output cap), scoped as the conversation's documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.contrib.auth.models import User

from conversations.models import Conversation
from conversations.services.turns.prompt import scope_in_force
from conversations.services.turns.tools import tools_offered
from gateway import selectors as gateway_selectors
from tools import registry
from tools import selectors as tool_selectors

# seconds the loop waits past a tool's own limit before it cancels the run itself
LIMIT_MARGIN_S = 5.0


@dataclass(frozen=True)
class LoopResult:
    """A run's result as the loop stores it."""

    content: str
    truncated: bool
    error: bool
    label: str


def _scope(conversation_id: str) -> tuple[int, ...] | None:
    conversation = Conversation.objects.filter(id=conversation_id).first()
    ids = scope_in_force(conversation).retrieval_ids()
    return None if ids is None else tuple(ids)


@dataclass(frozen=True)
class RegistryTool:
    """A registry tool offered to one user of the plan named ``plan``."""

    tool: registry.Tool
    plan: str

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def description(self) -> str:
        return self.tool.description

    @property
    def parameters(self) -> dict[str, Any]:
        return self.tool.parameters

    @property
    def timeout_s(self) -> float:
        """The loop's backstop: the tool's own limit plus :data:`LIMIT_MARGIN_S`."""
        return float(self.tool.wall_s()) + LIMIT_MARGIN_S

    async def run(self, arguments: dict[str, Any], context: Any) -> LoopResult:
        """Run the tool for ``context`` (the loop's: user, conversation); cancelling
        the caller cancels the run."""
        document_ids = await sync_to_async(_scope)(context.conversation_id)
        result = await registry.tool_run(
            self.tool,
            arguments=arguments,
            context=registry.ToolContext(
                user_id=context.user_id, plan=self.plan, document_ids=document_ids
            ),
        )
        return LoopResult(
            content=result.text,
            truncated=result.truncated,
            error=result.error,
            label=self.tool.label(arguments, result),
        )


def registry_tools(*, user: User) -> list[RegistryTool]:
    """Return the tools to offer ``user`` in a turn (the registry's offer)."""
    plan = gateway_selectors.plan_for_user(user=user).name
    offer = async_to_sync(tool_selectors.tools_available)(user_id=user.pk, plan=plan)
    return [RegistryTool(t, plan) for t in offer.tools]


# The composer's names for the built-in tools; other tools show their own name.
TITLES = {
    "run_python": "Run Python",
    "web_search": "Search the web",
    "fetch_url": "Read a web page",
    "search_documents": "Search my documents",
}


def tool_title(name: str) -> str:
    """Return the composer's name for the tool ``name`` (an MCP tool
    ``<server>__<tool>``: "<tool> (<server>)")."""
    if name in TITLES:
        return TITLES[name]
    server, _, tool = name.partition("__")
    return f"{tool} ({server})" if tool else name


def registry_menu(*, user: User) -> list[tuple[registry.Tool, bool]]:
    """Return the composer's Tools menu for ``user``: each tool staff allow for the
    user's plan, by name, with whether the user has it on
    (:func:`tools.selectors.tool_menu`)."""
    plan = gateway_selectors.plan_for_user(user=user).name
    return async_to_sync(tool_selectors.tool_menu)(user_id=user.pk, plan=plan)


@dataclass(frozen=True)
class MenuItem:
    """One tool of the composer's Tools menu: its ``name``, the ``title`` shown, its
    ``description`` and whether the user has it on (``enabled``)."""

    name: str
    title: str
    description: str
    enabled: bool


def tools_menu(*, user: User) -> list[MenuItem]:
    """Return the composer's Tools menu for ``user``: with the registry as
    CHAT_TOOLS_PROVIDER, every tool staff allow for the user's plan with the user's
    on/off (:func:`registry_menu`); with another provider its tools, all
    on; none when CHAT_TOOLS_PROVIDER is unset."""
    provider = settings.CHAT_TOOLS_PROVIDER
    if not provider:
        return []
    if provider == f"{__name__}.registry_tools":
        return [
            MenuItem(t.name, tool_title(t.name), t.description, on)
            for t, on in registry_menu(user=user)
        ]
    return [
        MenuItem(t.name, tool_title(t.name), t.description, True)
        for t in tools_offered(user=user).values()
    ]

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
from django.contrib.auth.models import User

from conversations.models import Conversation
from conversations.services.turns.prompt import scope_in_force
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

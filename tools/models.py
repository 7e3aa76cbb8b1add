"""What staff configure about tools (MCP servers, switches) and what users chose."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

SERVER_NAME = RegexValidator(
    r"^[a-zA-Z0-9-]{1,30}$",
    "Letters, digits and hyphens, at most 30: tools are named <server>__<tool>.",
)


class McpServer(models.Model):
    """An MCP server (streamable HTTP) whose tools are offered as ``<name>__<tool>``."""

    name = models.CharField(max_length=30, unique=True, validators=[SERVER_NAME])
    url = models.URLField(
        max_length=500, help_text="The streamable HTTP endpoint, e.g. https://host/mcp."
    )
    enabled = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name


class ToolSwitch(models.Model):
    """Staff's switch of one tool (by its registry name): off for everyone, or off
    for the plans named in ``off_for_plans`` (gateway.Plan names, one per line)."""

    tool = models.CharField(max_length=100, unique=True)
    enabled = models.BooleanField(default=True, help_text="Off: no one is offered it.")
    off_for_plans = models.TextField(
        blank=True,
        default="",
        help_text="Plan names (one a line) whose users are not offered this tool.",
    )

    class Meta:
        ordering = ["tool"]

    def __str__(self) -> str:
        return self.tool

    def plans_off(self) -> set[str]:
        """Return the plan names this tool is off for."""
        return {p.strip() for p in self.off_for_plans.splitlines() if p.strip()}


class ToolPreference(models.Model):
    """A user's choice: the tools they turned off (by name). Absent: all offered."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    disabled = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"tools of user {self.user_id}"

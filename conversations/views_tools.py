"""The composer's Tools menu: turn a tool on or off for the signed-in user.

Which tools the menu lists is :func:`conversations.services.turns.registry.tools_menu`
(rendered with the chat page); picking a tool for one message is a field of the
message's post (``tool``, :func:`conversations.views.message_send`).
"""

from __future__ import annotations

from django.http import JsonResponse
from django.views.decorators.http import require_POST

from chatsite.auth import AuthenticatedRequest
from chatsite.errors import InvalidInput
from chatsite.http import json_errors
from tools import services as tool_services

# the values of ``enabled`` that turn a tool on or off
_ON, _OFF = {"1", "true", "on"}, {"0", "false", "off"}


@require_POST
@json_errors
def tool_choice(request: AuthenticatedRequest) -> JsonResponse:
    """Turn the tool ``tool`` on or off (``enabled``: 1/true/on or 0/false/off, form
    fields) for the user's later turns; answers ``{"tool", "enabled", "disabled"}``
    (every tool now off). 400 (``invalid_input``) for a missing name or value."""
    enabled = str(request.POST.get("enabled", "")).lower()
    if enabled not in _ON | _OFF:
        raise InvalidInput("Say whether the tool is on: `enabled` is 1 or 0.")
    name = request.POST.get("tool")
    off = tool_services.tool_enabled_set(
        user_id=request.user.pk, name=name, enabled=enabled in _ON
    )
    return JsonResponse({"tool": name, "enabled": enabled in _ON, "disabled": off})

"""Appeals of moderation decisions: thin views (CONVENTIONS §2) over
:func:`safety.appeals.appeal_create`, for the chat page (session) and the API
(Bearer key, :mod:`conversations.openai.views`)."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse
from django.views.decorators.http import require_POST

from chatsite.auth import AuthenticatedRequest
from chatsite.http import json_errors
from conversations import selectors
from safety.appeals import answer_event_id, appeal_create
from safety.models import Appeal


def appeal_json(appeal: Appeal) -> dict[str, Any]:
    """The body that answers an appeal: its id, the event's and its status."""
    return {
        "appeal": {
            "id": appeal.pk,
            "moderation_event_id": appeal.event_id,
            "status": appeal.status,
            "message": "Thank you: staff will review this decision. If it was a "
            "mistake, it will not count against your account.",
        }
    }


@require_POST
@json_errors
def moderation_appeal(request: AuthenticatedRequest, event_id: Any) -> JsonResponse:
    """``POST /moderation/events/<id>/appeal/`` (``comment`` optional): appeal one of
    the user's own moderation events; 201 with the appeal, 404 for another's."""
    appeal = appeal_create(
        user=request.user, event_id=event_id, comment=request.POST.get("comment", "")
    )
    return JsonResponse(appeal_json(appeal), status=201)


@require_POST
@json_errors
def answer_appeal(request: AuthenticatedRequest, message_id: Any) -> JsonResponse:
    """``POST /moderation/answers/<message id>/appeal/``: appeal the cut of one of the
    user's answers by output moderation; 201 with the appeal, 404 otherwise."""
    job_id = selectors.answer_job_id(user=request.user, message_id=message_id)
    event_id = answer_event_id(user=request.user, job_id=job_id)
    appeal = appeal_create(
        user=request.user, event_id=event_id, comment=request.POST.get("comment", "")
    )
    return JsonResponse(appeal_json(appeal), status=201)

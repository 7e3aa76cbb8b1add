"""HTTP endpoints of the inference tier: ``/metrics`` (Prometheus text format)."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.views.decorators.http import require_safe

from inference.metrics import metrics_render


def _metrics_allowed(request: HttpRequest) -> bool:
    """Staff users, allowed scraper addresses, or the bearer METRICS_TOKEN."""
    if request.user.is_authenticated and request.user.is_staff:
        return True
    if request.META.get("REMOTE_ADDR") in settings.METRICS_ALLOWED_IPS:
        return True
    token = settings.METRICS_TOKEN
    auth = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(auth, f"Bearer {token}")


@login_not_required
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve every process's inference metrics (see :mod:`inference.metrics`).

    Open to staff users, to METRICS_ALLOWED_IPS (default: loopback, for a scraper on the
    same host) and to ``Authorization: Bearer <METRICS_TOKEN>``; anyone else gets 403.
    """
    if not _metrics_allowed(request):
        return HttpResponseForbidden("metrics are for staff and allowed scrapers")
    body, content_type = metrics_render()
    return HttpResponse(body, content_type=content_type)

"""The SSE relay: a generation's Redis stream to the browser (DESIGN §4.4, §8).

``GET .../messages/<id>/stream/`` is an async view returning an async generator in a
StreamingHttpResponse (streams under daphne). It reads ``inf:gen:{job_id}`` with
XREAD BLOCK from the ``Last-Event-ID`` header (or ``?last_event_id=``) onwards and writes:

- ``event: meta``  ``{"model", "worker", "queue_ms"}`` (+ ``"cache": "exact"|"semantic"``
  for an answer served from the gateway's answer caches)
- ``event: token`` ``{"t": "..."}``: consecutive deltas coalesced into one frame
- ``event: done``  ``{"message_id", "status", "finish_reason", "usage", "html", "cache",
  ...}`` (``cache``: the message's ``cache_kind``, "" when generated)
- ``event: error`` ``{"code", "message", "message_id", "html"}``
- ``: ping`` comment every SSE_HEARTBEAT_S seconds

Every frame's ``id:`` is the Redis entry id of its last event, so a reconnect resumes
exactly after it. On the terminal event the relay finalises the message. While a client
is attached the generation is watched; on disconnect (CancelledError at the pending
await) the ``finally`` detaches it, and with no client left the worker cancels it after
INFERENCE_DETACH_GRACE_S unless a client re-attaches.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import reverse

from chatsite.db import db_brief, db_release
from chatsite.errors import DomainError, InvalidInput
from chatsite.http import error_response
from conversations import selectors, services
from conversations.models import Message
from conversations.rendering import markdown_to_html
from inference import client as inference_client
from inference import protocol

READ_BLOCK_MS = 1000


def sse_frame(event: str, data: dict[str, Any], event_id: str | None = None) -> str:
    """Return one SSE frame (``id``, ``event``, single-line JSON ``data``)."""
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def message_payload(message: Message) -> dict[str, Any]:
    """Return the final state of an answer as sent in ``done`` / ``error`` frames.

    Sync (reads the answer's citations): call it through ``chatsite.db.db_brief``. Each citation
    is ``{"number", "title", "passage", "url"}`` (passage numbers start at 1).
    """
    citations = [
        {
            "number": c.number,
            "title": c.chunk.document.title,
            "passage": c.chunk.ord + 1,
            "url": reverse("document-detail", args=[c.chunk.document_id])
            + f"#p{c.chunk.ord}",
        }
        for c in message.citations.select_related("chunk__document").order_by("number")
    ]
    return {
        "message_id": str(message.id),
        "status": message.status,
        "finish_reason": message.finish_reason,
        "model": message.model,
        "usage": {
            "prompt_tokens": message.prompt_tokens or 0,
            "completion_tokens": message.token_count or 0,
            "cached_tokens": message.cached_tokens or 0,
        },
        "ttft_ms": message.ttft_ms,
        "latency_ms": message.latency_ms,
        "html": markdown_to_html(message.content),
        "error": message.error,
        "cache": message.cache_kind,
        "citations": citations,
    }


async def _final_frame(message: Message, event_id: str | None) -> str:
    payload = await db_brief(message_payload)(message)
    if message.status == Message.Status.ERROR:
        payload.update(code="generation_failed", message=message.error)
        return sse_frame("error", payload, event_id)
    return sse_frame("done", payload, event_id)


def _resume_point(request: HttpRequest) -> str:
    last = (
        request.headers.get("Last-Event-ID") or request.GET.get("last_event_id") or ""
    )
    if not last:
        return protocol.STREAM_START
    if not protocol.STREAM_ID_RE.match(last) or any(
        int(part) >= 2**64 for part in last.split("-")
    ):
        raise InvalidInput(
            "Last-Event-ID is not a stream position.", code="bad_last_event_id"
        )
    return last


def _finalized(message_id: Any) -> Message:
    """Finalise (idempotent) and return the message as stored."""
    services.message_finalize(message_id=message_id)
    return Message.objects.get(id=message_id)


async def relay_events(message: Message, after: str) -> AsyncIterator[str]:
    """Yield the SSE frames of ``message``'s generation after stream id ``after``."""
    job_id = message.job_id
    yield "retry: 1000\n\n"
    if message.status != Message.Status.STREAMING:
        yield await _final_frame(message, None)
        return
    await inference_client.astream_attach(job_id=job_id)
    try:
        started = after != protocol.STREAM_START
        last_event_at = time.time() if started else message.created_at.timestamp()
        last_sent = time.monotonic()
        task = asyncio.current_task()
        while True:
            events = await inference_client.agen_read(
                job_id=job_id, after=after, block_ms=READ_BLOCK_MS
            )
            if task is not None and task.cancelling():
                # The client went away. redis-py can absorb the CancelledError that
                # Django's disconnect delivers while a pooled connection is released;
                # the task still counts the request, so honour it here.
                raise asyncio.CancelledError
            if not events:
                if time.monotonic() - last_sent >= settings.SSE_HEARTBEAT_S:
                    last_sent = time.monotonic()
                    yield ": ping\n\n"
                await db_brief(services.message_watchdog)(
                    message=message, started=started, last_event_at=last_event_at
                )
                continue
            started = True
            last_event_at = time.time()
            text: list[str] = []
            text_id = ""
            after = events[-1].id
            for event in events:
                if event.type == protocol.EVENT_TOKEN:
                    text.append(event.data["t"])
                    text_id = event.id
                    continue
                if text:
                    yield sse_frame("token", {"t": "".join(text)}, text_id)
                    text = []
                if event.is_terminal:
                    final = await db_brief(_finalized)(message.id)
                    if final.status == Message.Status.STREAMING:
                        # failed before its first token and retried on a fallback
                        # pool (gateway): read the restarted stream from its start
                        message, after, started = final, protocol.STREAM_START, False
                        break
                    yield await _final_frame(final, event.id)
                    return
                yield sse_frame(event.type, event.data, event.id)
            if text:
                yield sse_frame("token", {"t": "".join(text)}, text_id)
            last_sent = time.monotonic()
    finally:
        await inference_client.astream_detach(
            job_id=job_id, grace_s=settings.INFERENCE_DETACH_GRACE_S
        )


async def message_stream(
    request: HttpRequest, conversation_id: Any, message_id: Any
) -> HttpResponse:
    """Stream an answer as Server-Sent Events (owner only: another user's id is a 404)."""
    user = await request.auser()
    try:
        message = await selectors.amessage_get(
            user=user, conversation_id=conversation_id, message_id=message_id
        )
        after = _resume_point(request)
    except DomainError as exc:
        return error_response(exc)
    finally:
        await db_release()  # the stream needs none until its end (chatsite/db.py)
    if message.role != Message.Role.ASSISTANT:
        return JsonResponse(
            {
                "error": {
                    "code": "not_streamable",
                    "message": "Only answers can be streamed.",
                }
            },
            status=400,
        )
    response = StreamingHttpResponse(
        relay_events(message, after), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response

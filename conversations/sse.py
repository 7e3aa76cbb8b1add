"""The SSE relay: a generation's Redis stream to the browser (DESIGN §4.4, §8).

``GET .../messages/<id>/stream/`` is an async view returning an async generator in a
StreamingHttpResponse (streams under uvicorn, or any ASGI server). It follows ``inf:gen:{job_id}`` (through
the gateway's follower and the process's one stream reader, :mod:`inference.streams`)
from the ``Last-Event-ID`` header (or ``?last_event_id=``) onwards and writes:

- ``event: meta``  ``{"model", "worker", "queue_ms"}`` (+ ``"cache": "exact"|"semantic"``
  for an answer served from the gateway's answer caches)
- ``event: token`` ``{"t": "..."}``: the deltas of up to SSE_COALESCE_MS ms in one frame
- ``event: queue`` ``{"position": N}``: about once a second while the job waits for a
  free worker (1 = next; 0 = a worker is taking it), none once the answer runs
- ``event: done``  ``{"message_id", "status", "finish_reason", "usage", "html", "cache",
  ...}`` (``cache``: the message's ``cache_kind``, "" when generated)
- ``event: error`` ``{"code", "message", "message_id", "retryable", "retry_after_s"}``
  (+ the stored answer's fields for a failed answer): :func:`chatsite.errors.error_sse`
- ``: ping`` comment every SSE_HEARTBEAT_S seconds

The chat page's message POST, sent with ``Accept: text/event-stream``, is answered
with the same stream (:func:`turn_stream_response`), after a first ``event: turn``
frame carrying the started turn's JSON: the answer's first text then needs no second
request (and no second session, user and message read; docs/benchmarks.md). The GET
stays for reconnects and page loads.

Every frame's ``id:`` is the Redis entry id of its last event, so a reconnect resumes
exactly after it. On the terminal event the relay finalises the message. While a client
is attached the generation is watched; on disconnect (CancelledError at the pending
await) the ``finally`` detaches it, and with no client left the worker cancels it after
INFERENCE_DETACH_GRACE_S unless a client re-attaches.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.urls import reverse

from chatsite.auth import AuthenticatedRequest
from chatsite.db import db_brief, request_thread_release
from chatsite.db_batch import db_batched
from chatsite.errors import DomainError, InvalidInput, error_response, error_sse
from chatsite.sse import frame_json, sse_frame
from conversations import selectors, services
from conversations.events import (
    SSE_QUEUE,
    SSE_TURN,
)
from conversations.models import Message
from conversations.rendering import answer_to_html
from conversations.sse_steps import calling_get, step_events
from conversations.sse_steps import tool_step_payload as tool_step_payload
from gateway import generations
from inference import protocol
from memory.models import Citation


def token_frame(text: str, event_id: str) -> bytes:
    """Return the ``token`` frame of ``text`` (data ``{"t": text}``), UTF-8: the hot
    path, the bytes of :func:`chatsite.sse.sse_frame` without building a dict."""
    return (
        f'id: {event_id}\nevent: token\ndata: {{"t": {frame_json(text)}}}\n\n'.encode()
    )


def message_payload(
    message: Message, *, cited: list[Citation] | None = None
) -> dict[str, Any]:
    """Return the final state of an answer as sent in ``done`` / ``error`` frames.
    Sync (reads the answer's citations, unless ``cited`` gives them: read with many
    answers' by :func:`_finals_read`, in number order, ``chunk__document`` joined).
    Each citation is ``{"number", "title", "passage", "url"}`` (passage numbers start
    at 1)."""
    if cited is None:
        cited = list(
            message.citations.select_related("chunk__document").order_by("number")
        )
    citations: list[dict[str, Any]] = [
        {
            "number": c.number,
            "title": c.chunk.document.title,
            "passage": c.chunk.ord + 1,
            "url": reverse("document-detail", args=[c.chunk.document_id])
            + f"#p{c.chunk.ord}",
        }
        for c in cited
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
        "html": answer_to_html(
            message.content,
            message_id=str(message.id),
            citations=[c["number"] for c in citations],
        ),
        # the Markdown source, for the page's copy button (set as text, never HTML)
        "content": message.content,
        "error": message.error,
        "cache": message.cache_kind,
        "citations": citations,
        "memory_unavailable": message.memory_unavailable,
    }


def _message_final(message_id: Any) -> tuple[Message, dict[str, Any]]:
    """The answer and its :func:`message_payload`, in one brief database step."""
    message = Message.objects.select_related("conversation").get(id=message_id)
    return message, message_payload(message)


_final_batched = db_batched(_message_final)
_Final = tuple[Message, dict[str, Any]]


class _FinalRecorder(services.MessageRecorder):
    """Stores the answer as :class:`~conversations.services.MessageRecorder` does and,
    once that commits, reads its final state in the same database step (``final``,
    what the ``done`` frame shows: no step of its own after a burst of settlements)."""

    def __init__(self, message_id: Any) -> None:
        self.message_id = message_id
        self.final: _Final | None = None

    def finalize(self, *, job_id: str, outcome: generations.Outcome) -> bool:
        """:meth:`MessageRecorder.finalize`, then the read once it commits."""
        if not super().finalize(job_id=job_id, outcome=outcome):
            return False
        transaction.on_commit(self._read, robust=True)
        return True

    def _read(self) -> None:
        self.final = _message_final(self.message_id)

    @staticmethod
    def finalize_many(
        items: list[tuple[services.MessageRecorder, str, generations.Outcome]],
    ) -> list[bool]:
        """:meth:`MessageRecorder.finalize_many`, then, once that commits, the final
        state of every answer it finalised in one read (two queries)."""
        done = services.MessageRecorder.finalize_many(items)
        recorders = [
            recorder
            for (recorder, _job, _outcome), finalised in zip(items, done, strict=True)
            if finalised and isinstance(recorder, _FinalRecorder)
        ]
        if recorders:
            transaction.on_commit(partial(_finals_read, recorders), robust=True)
        return done


def _finals_read(recorders: list[_FinalRecorder]) -> None:
    """Set each recorder's ``final`` (its answer and :func:`message_payload`) from
    one read of their answers and one of their citations (those not read yet: an
    answer with tool calls was finalised, and read, alone)."""
    recorders = [recorder for recorder in recorders if recorder.final is None]
    if not recorders:
        return
    ids = [r.message_id for r in recorders]
    messages = Message.objects.select_related("conversation").filter(id__in=ids)
    by_id = {str(m.id): m for m in messages}
    # one query for every answer's citations, grouped here: Django's prefetch_related
    # clones a queryset per answer (a deepcopy each, most of this read at 1,000)
    cited: dict[str, list[Citation]] = {}
    citations = Citation.objects.select_related("chunk__document").filter(
        message_id__in=ids
    )
    for citation in citations.order_by("message_id", "number"):
        cited.setdefault(str(citation.message_id), []).append(citation)
    for recorder in recorders:
        message = by_id.get(str(recorder.message_id))
        if message is not None:
            recorder.final = (
                message,
                message_payload(message, cited=cited.get(str(message.id), [])),
            )


async def _final_frame(
    message_id: Any, event_id: str | None, final: _Final | None = None
) -> tuple[str, Message | None]:
    """The answer's ``done`` (or ``error``) frame, read from the database in batches,
    and the answer as read (None when it could not be)."""
    try:
        message, payload = final or await _final_batched(message_id)
    except DomainError as exc:
        return error_sse(exc, event_id=event_id, message_id=str(message_id)), None
    if message.status == Message.Status.ERROR:
        failed = DomainError(message.error, code="generation_failed", retryable=True)
        return error_sse(failed, event_id=event_id, **payload), message
    return sse_frame(protocol.EVENT_DONE, payload, event_id), message


def _turn_goes_on(final: Message | None) -> bool:
    """Whether the turn may go on after the answer ``final`` (as its done frame
    showed it; None: not known): only an answer that ended calling tools has a next
    step, so any other ends the stream without asking the database again."""
    return final is None or final.finish_reason == protocol.FINISH_TOOL_CALLS


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


async def relay_events(
    message: Message, after: str, first: bytes = b""
) -> AsyncGenerator[bytes, None]:
    """Yield the SSE frames (UTF-8) of ``message``'s generation after stream id
    ``after``, and of the turn's later steps when it called tools; ``first`` (a
    frame) before them.

    A thin adapter over :func:`gateway.generations.generation_follow` (resumable: a
    client that leaves detaches; the answer is settled through
    :class:`conversations.services.MessageRecorder`). After the ``done`` frame of an
    answer that called tools (finish ``tool_calls``) the stream stays open: a
    ``tool_step`` frame per call as it runs and ends, then ``next`` (the turn's next
    message, whose generation follows in the same response, from its start), or
    ``step_end`` (stopped, or the step limit) / ``error`` (the next step could not
    start) when the turn ends there.

    One generator from the follower to the server: each layer between them is paid
    per frame, so the frames of one answer are written here, not in a generator of
    their own.
    """
    await request_thread_release()  # no connection or thread held while waiting
    yield first + b"retry: 1000\n\n"  # one write for both
    current: Message | None = message
    while current is not None:
        final: Message | None = None
        if current.status != Message.Status.STREAMING:
            frame, final = await _final_frame(current.id, None)
            yield frame.encode()
        else:
            generation = services.message_generation(current)
            recorder = _FinalRecorder(current.id)
            follow = generations.generation_follow(
                generation,
                after=after,
                recorder=recorder,
                message_id=current.id,
                resumable=True,
                report_queue=True,
            )
            last_sent, heartbeat_s = time.monotonic(), settings.SSE_HEARTBEAT_S
            async with aclosing(follow) as items:
                async for item in items:
                    if isinstance(item, generations.Delta):
                        yield token_frame(item.text, item.event_id)
                    elif isinstance(item, generations.Meta):
                        meta = sse_frame(protocol.EVENT_META, item.data, item.event_id)
                        yield meta.encode()
                    elif isinstance(item, generations.Queued):
                        queued = sse_frame(SSE_QUEUE, {"position": item.position})
                        yield queued.encode()
                    elif isinstance(item, generations.Idle):
                        if time.monotonic() - last_sent < heartbeat_s:
                            continue
                        yield b": ping\n\n"
                    elif isinstance(item, generations.Ended):
                        frame, final = await _final_frame(
                            current.id, item.event_id, recorder.final
                        )
                        yield frame.encode()
                        break
                    elif isinstance(item, generations.Broken):
                        yield error_sse(item.error, message_id=str(current.id)).encode()
                        break
                    last_sent = time.monotonic()
        if not _turn_goes_on(final):
            return
        calling = await db_brief(calling_get)(current.id)
        if calling is None:
            return
        current, after = None, protocol.STREAM_START
        async with aclosing(step_events(calling)) as steps:
            async for step in steps:
                if isinstance(step, Message):
                    current = step
                else:
                    yield step.encode()


def _stream_target(
    request: AuthenticatedRequest, conversation_id: Any, message_id: Any
) -> Message:
    """The signed-in user's message to stream (NotFound for anyone else's).

    ``request.user``, not ``await request.auser()``: LoginRequiredMiddleware already read
    the user (its ``process_view`` is sync, so it ran in a thread) and ``auser()`` keeps a
    cache of its own, so it would query the user again. Run through ``db_brief``: the view
    makes one thread hop and one query before the first frame, where it made three hops
    (``auser()``, the message, the connection's release) and two queries.
    """
    return selectors.message_get(
        user=request.user, conversation_id=conversation_id, message_id=message_id
    )


async def message_stream(
    request: AuthenticatedRequest, conversation_id: Any, message_id: Any
) -> HttpResponseBase:
    """Stream an answer as Server-Sent Events (owner only: another user's id is a 404)."""
    try:
        message = await db_brief(_stream_target)(request, conversation_id, message_id)
        after = _resume_point(request)
    except DomainError as exc:
        return error_response(exc)
    if message.role != Message.Role.ASSISTANT:
        return error_response(
            InvalidInput("Only answers can be streamed.", code="not_streamable")
        )
    return _event_stream(relay_events(message, after))


class EventStreamResponse(StreamingHttpResponse):
    """A streaming response of SSE frames (bytes, UTF-8) handed to the server as the
    relay yields them: Django's own async iteration passes each part through two
    generators of its own (``__aiter__``, and the ``streaming_content`` wrapper that
    encodes str parts), a cost paid per frame."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        """The frames as the relay (or a middleware that rewrapped
        ``streaming_content``) yields them."""
        if not self.is_async:
            return super().__aiter__()
        frames: AsyncIterator[bytes] = self._iterator  # type: ignore[attr-defined]
        return frames  # (Django's, set from streaming_content; not in its stubs)


def _event_stream(
    frames: AsyncIterator[bytes], status: int = 200
) -> StreamingHttpResponse:
    response = EventStreamResponse(
        frames, content_type="text/event-stream", status=status, charset="utf-8"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each frame on at once
    return response


def event_stream_accepted(request: HttpRequest) -> bool:
    """Whether the client named ``text/event-stream`` in its Accept header (a bare
    ``*/*`` does not count: clients that expect the JSON of a turn keep it)."""
    return any(
        media.main_type == "text" and media.sub_type == "event-stream"
        for media in request.accepted_types
    )


def turn_stream_response(
    payload: dict[str, Any], message: Message
) -> StreamingHttpResponse:
    """A 201 whose body is the answer's SSE stream: ``event: turn`` with ``payload``
    (the started turn's JSON), then the frames of :func:`relay_events` from the start
    of ``message``'s generation. A client that loses it resumes with the GET of the
    stream URL and ``Last-Event-ID``, as after any dropped stream."""
    turn = sse_frame(SSE_TURN, payload).encode()
    return _event_stream(
        relay_events(message, protocol.STREAM_START, first=turn), status=201
    )

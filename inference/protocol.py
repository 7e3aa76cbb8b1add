"""The Redis protocol between the web tier and inference workers (DESIGN §5).

This module owns every event schema of the inference tier and the job format;
nothing else builds an event by hand. The key names live in :mod:`inference.keys`.
One owner per contract (CONVENTIONS §6): a reader finds the whole protocol, job,
events and their schemas, in one place, and a change to it in one diff.

Keys (named in :mod:`inference.keys`)
- a pool's queue (``inf:q:*``): stream of jobs, consumer group ``workers``; an entry
  holds one field ``job`` (the JSON of :class:`Job`).
- a pool's background lane (``inf:qb:*``), the same format: an embedding pool's
  bulk jobs (ingestion, large requests), a chat pool's background generations (titles,
  summaries, fact extraction). Taken only when the queue is empty; a chat worker
  whose slots are all taken stops a background job for an interactive one (the
  background job ends with ``error {code: "preempted"}`` and its caller sends it again).
- a generation's stream (``inf:gen:*``): each entry has fields ``e`` (event type) and
  ``d`` (JSON payload). Expires ``stream_ttl`` seconds after its terminal event.
- its final mark: set (NX) by whoever appends the terminal event, so a generation
  has exactly one; its cancel flag: present = the user asked to stop; its watch count
  and detach deadline: SSE clients attached, and the epoch second after which a
  generation with none attached is cancelled.
- a pool's workers: sorted set, member = worker id, score = last heartbeat (epoch s);
  a worker's hash, written at each heartbeat: ``slots``, ``busy``, ``pool``,
  ``engine``, ``model``, ``heartbeat`` (epoch s), ``stopping`` (1 once the worker takes
  no new job and drains), ``reclaim_scans`` (crash-recovery scans done).
- a job's attempts: how many times crash recovery re-queued it (a job that lost its
  worker before its first token is retried at most :data:`MAX_RETRIES` times).

Queue entries are deleted (XACK + XDEL) once handled, so a queue's XLEN is the jobs
waiting plus the jobs running (the consumer group's pending entries).

Events on ``inf:gen:{job_id}`` (payload schemas in :data:`EVENT_SCHEMAS`)
- ``meta``  ``{"model": str, "worker": str, "queue_ms": int}``, first, when a worker takes the job:
  written just before its engine starts on the prompt, so it is the generation's
  "started" signal (the job left the queue, prompt processing begins; the first
  ``token`` follows once the prompt is read). The chat page shows "Reading the
  conversation…" from it until the first token.
  A generation the gateway answers from its cache (no job, no worker) carries
  ``"cache": "exact"|"semantic"`` too (optional field; ``worker`` is ``"cache"``).
- ``token`` ``{"t": str}``, whole Unicode characters only.
- ``tool_call`` ``{"index": int, "id"?: str, "name"?: str, "arguments_delta": str}``:
  one piece of a tool call the model makes (:func:`tool_call_fields`); a generation
  that made calls ends with ``done`` ``finish_reason: "tool_calls"``.
- ``done``  ``{"finish_reason": "stop"|"length"|"cancelled"|"content_filter"|"tool_calls",
  "usage": Usage, "ttft_ms": int|None, "latency_ms": int}``: terminal.
- ``error`` ``{"code": str, "message": str, "usage": Usage|None}``: terminal. A worker
  that ends a job with an error after it wrote tokens (its engine failed, or crash
  recovery ends a dead worker's job) reports what was spent: ``prompt_tokens`` by its
  engine's count, ``completion_tokens`` = the token events on the stream; ``null``
  before the first token and when the web tier writes the error (watchdog). The gateway
  bills an error after tokens (gateway/generations/outcome.py).

Lost streams. Redis without persistence restarts empty: a running job's stream loses
what it held. The worker that runs the job keeps every entry it wrote (meta, tokens)
and, when its next write finds the stream gone, writes them back first under their
original entry ids, then goes on (inference/outage.py). Entry ids therefore stay valid
across a restart: a follower's cursor or a browser's Last-Event-ID resumes exactly
after what it had, and the settled answer holds everything generated. No new event
type: readers need not know a restart happened.

Embedding jobs (``kind="embed"``, on the queue of an embedding pool) carry their texts in
``input`` and end with one terminal event instead of tokens:
- ``embedding`` ``{"model": str, "worker": str, "dim": int, "count": int,
  "vectors": str, "usage": Usage, "queue_ms": int, "latency_ms": int}``: ``vectors`` is
  the base64 of ``count`` x ``dim`` little-endian float32 values, row-major, one row per
  input text in order (:mod:`inference.vectors`); ``usage``
  counts the input tokens as ``prompt_tokens``.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from json.encoder import encode_basestring
from typing import Any

from inference.redis_types import RedisFields
from inference.schemas import Optional, optional_int, schema_validate

GROUP = "workers"

EVENT_META = "meta"
EVENT_TOKEN = "token"
EVENT_TOOL_CALL = "tool_call"
EVENT_DONE = "done"
EVENT_ERROR = "error"
EVENT_EMBEDDING = "embedding"
TERMINAL_EVENTS = frozenset({EVENT_DONE, EVENT_ERROR, EVENT_EMBEDDING})

# Job kinds: a chat generation (token stream) or an embedding request (one vector event).
KIND_GENERATE = "generate"
KIND_EMBED = "embed"
JOB_KINDS = frozenset({KIND_GENERATE, KIND_EMBED})

FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_CANCELLED = "cancelled"
FINISH_CONTENT_FILTER = "content_filter"
# The model ended its turn with tool calls (``tool_call`` events before ``done``).
FINISH_TOOL_CALLS = "tool_calls"
FINISH_REASONS = frozenset(
    {
        FINISH_STOP,
        FINISH_LENGTH,
        FINISH_CANCELLED,
        FINISH_CONTENT_FILTER,
        FINISH_TOOL_CALLS,
    }
)

# Error codes a generation can end with (the `code` of an `error` event).
ERROR_QUEUE_TIMEOUT = "queue_timeout"
ERROR_NO_WORKER = "worker_unavailable"
ERROR_ENGINE = "engine_error"
ERROR_CONTEXT_OVERFLOW = "context_overflow"
ERROR_WORKER_LOST = "worker_lost"
# A background job stopped to free its slot for an interactive one (never a user's).
ERROR_PREEMPTED = "preempted"

# Crash recovery: a job whose worker died before its first token is re-queued this many
# times at most; after that (or once it emitted a token) it ends with `worker_lost`.
MAX_RETRIES = 1

# The gateway's answer caches (the optional ``cache`` field of a ``meta`` event).
CACHE_EXACT = "exact"
CACHE_SEMANTIC = "semantic"
CACHE_KINDS = frozenset({CACHE_EXACT, CACHE_SEMANTIC})

STREAM_ID_RE = re.compile(r"^\d{1,20}-\d{1,20}$")
STREAM_START = "0-0"


@dataclass
class Usage:
    """Exact token usage reported by the engine (tokens, not characters)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        """Build from an event's ``usage`` object (missing or null: all zero)."""
        data = data or {}
        return cls(
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            completion_tokens=int(data.get("completion_tokens", 0)),
            cached_tokens=int(data.get("cached_tokens", 0)),
        )


# Job.priority of a job taken from a pool's background lane (inf:qb). The llama.cpp
# engine runs those on a context of their own, so the chat slots keep their KV prefix
# cache (inference/engines/llamacpp.py).
PRIORITY_BACKGROUND = -1


@dataclass
class Job:
    """One request as it travels on ``inf:q:{pool}``: a generation or an embedding.

    ``messages`` are OpenAI chat messages (``{"role", "content"}``; an assistant
    message may carry ``tool_calls`` and a ``tool`` message ``tool_call_id``);
    ``params`` holds sampling parameters (``max_tokens`` in tokens, ``temperature``,
    ``top_p``, ``stop``), the tool-calling ones under their OpenAI names (``tools``,
    ``tool_choice``, ``parallel_tool_calls``) and engine-specific options (``script`` for the scripted engine). ``enqueued_at``
    and ``deadline`` are epoch seconds: a job still queued at its deadline is dropped.
    ``kind`` is :data:`KIND_GENERATE` or :data:`KIND_EMBED`; an embedding job has no
    messages and carries the texts to embed in ``input``. ``priority`` is set by the
    worker that takes the job: :data:`PRIORITY_BACKGROUND` for one of the background
    lane (``inf:qb``), whatever its sender wrote; engines may run those apart.
    ``affinity``: the conversation's key (:func:`inference.affinity.affinity_of`, ""
    for none): the worker that runs it records itself as the conversation's preferred
    worker. Left out of the entry when "" (the entry is then as without affinity).
    """

    job_id: str
    messages: list[dict[str, Any]]
    params: dict[str, Any] = field(default_factory=dict)
    user_ref: str = ""
    priority: int = 0
    enqueued_at: float = 0.0
    deadline: float = 0.0
    kind: str = KIND_GENERATE
    input: list[str] = field(default_factory=list)
    affinity: str = ""

    def to_fields(self) -> RedisFields:
        """Serialise to the fields of a queue stream entry: the job as JSON, its
        fields in declaration order (``job_id`` first: :func:`job_entry_prefix`).

        A shallow dict, not ``dataclasses.asdict`` (which deep-copies the messages
        only for ``json.dumps`` to read them): the same JSON, for less of the
        turn's CPU."""
        data = {name: getattr(self, name) for name in _JOB_FIELDS}
        if not self.affinity:
            del data["affinity"]
        return {"job": json.dumps(data, ensure_ascii=False)}

    @classmethod
    def from_fields(cls, fields: dict[Any, Any]) -> Job:
        """Parse a queue stream entry; raises ``ValueError`` on a malformed one."""
        raw = fields.get("job", fields.get(b"job"))
        if raw is None:
            raise ValueError("queue entry has no 'job' field")
        data = json.loads(raw)
        if not isinstance(data.get("messages"), list) or not data.get("job_id"):
            raise ValueError("queue entry is not a job")
        if data.get("kind", KIND_GENERATE) not in JOB_KINDS:
            raise ValueError(f"unknown job kind {data.get('kind')!r}")
        inputs = data.get("input", [])
        if not isinstance(inputs, list) or not all(isinstance(t, str) for t in inputs):
            raise ValueError("a job's input must be a list of strings")
        return cls(**data)

    @property
    def max_tokens(self) -> int:
        """Upper bound on generated tokens asked by the caller (default 512)."""
        return int(self.params.get("max_tokens") or 512)


_JOB_FIELDS = tuple(f.name for f in dataclass_fields(Job))


def job_entry_prefix(job_id: str) -> str:
    """Return how the ``job`` field of ``job_id``'s queue entry begins.

    :meth:`Job.to_fields` writes ``job_id`` first, so a queue scan can tell a job's
    entry by this prefix without parsing the JSON (see
    :func:`inference.waiting.aqueue_position`).
    """
    return json.dumps({"job_id": job_id}, ensure_ascii=False)[:-1]


def new_job_id() -> str:
    """Return a fresh job id (a UUID4 string)."""
    return str(uuid.uuid4())


def _is_usage(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(value.get(k), int)
        for k in ("prompt_tokens", "completion_tokens", "cached_tokens")
    )


EVENT_SCHEMAS: dict[str, dict[str, Any]] = {
    EVENT_META: {
        "model": str,
        "worker": str,
        "queue_ms": int,
        "cache": Optional(lambda v: v in CACHE_KINDS),
    },
    EVENT_TOKEN: {"t": str},
    EVENT_TOOL_CALL: {
        "index": int,
        "id": Optional(lambda v: isinstance(v, str) and v != ""),
        "name": Optional(lambda v: isinstance(v, str) and v != ""),
        "arguments_delta": str,
    },
    EVENT_DONE: {
        "finish_reason": lambda v: v in FINISH_REASONS,
        "usage": _is_usage,
        "ttft_ms": optional_int,
        "latency_ms": int,
    },
    EVENT_ERROR: {
        "code": str,
        "message": str,
        "usage": lambda v: v is None or _is_usage(v),
    },
    EVENT_EMBEDDING: {
        "model": str,
        "worker": str,
        "dim": int,
        "count": int,
        "vectors": str,
        "usage": _is_usage,
        "queue_ms": int,
        "latency_ms": int,
    },
}


def event_validate(event_type: str, payload: dict[str, Any]) -> None:
    """Check a payload against its event schema (:func:`schema_validate`).

    Raises ``ValueError`` for an unknown event type or a payload that does not fit.
    """
    schema = EVENT_SCHEMAS.get(event_type)
    if schema is None:
        raise ValueError(f"unknown event type {event_type!r}")
    schema_validate(event_type, schema, payload)


def event_fields(event_type: str, payload: dict[str, Any]) -> RedisFields:
    """Validate and serialise an event to stream-entry fields (``e``, ``d``)."""
    event_validate(event_type, payload)
    return {"e": event_type, "d": json.dumps(payload, ensure_ascii=False)}


def tool_call_fields(
    *, index: int, arguments_delta: str, id: str | None = None, name: str | None = None
) -> RedisFields:
    """Validate and serialise a ``tool_call`` event (one piece of one call).

    The first event of a call (its ``index``, 0-based in the order the model made
    the calls) carries ``id`` and ``name``; the call's JSON arguments are the
    concatenation of its events' ``arguments_delta`` in stream order.
    """
    payload: dict[str, Any] = {"index": index, "arguments_delta": arguments_delta}
    if id is not None:
        payload["id"] = id
    if name is not None:
        payload["name"] = name
    return event_fields(EVENT_TOOL_CALL, payload)


def token_fields(text: str) -> RedisFields:
    """Serialise a ``token`` event (hot path: skips the generic validation).

    ``d`` is ``json.dumps({"t": text}, ensure_ascii=False)`` to the byte, built from
    the JSON string of ``text`` (json's own C escaping) without a dumps per token.
    """
    return {"e": EVENT_TOKEN, "d": '{"t": ' + encode_basestring(text) + "}"}


@dataclass(slots=True)
class Event:
    """One decoded entry of a generation stream (slots: the hub makes one per entry,
    tens of thousands a second at 1,000 streams)."""

    id: str
    type: str
    data: dict[str, Any]
    # the token entries this event stands for: 1, or more for a run of tokens read
    # joined (:func:`inference.protocol_runs.event_parse_run`), whose ``id`` is the
    # run's last entry's
    tokens: int = 1

    @property
    def is_terminal(self) -> bool:
        """True for ``done`` and ``error``."""
        return self.type in TERMINAL_EVENTS


# A token entry's data as :func:`token_fields` writes it: ``{"t": "<text>"}``.
TOKEN_HEAD, TOKEN_TAIL = '{"t": "', '"}'


def event_parse_flat(entry_id: str, fields: list[str]) -> Event:
    """Decode a stream entry as Redis sends it (``[name, value, ...]``, str), without
    building a dict first: the stream hub's hot path. Every entry we write is
    ``e``, ``d`` in that order (:func:`event_fields`); any other shape takes the
    general path of :func:`event_parse`.

    A token's data whose JSON string has no escape (no backslash between the quotes
    of ``{"t": "..."}``: JSON escapes every quote, backslash and control character)
    is its text as written, taken without the JSON decoder; any other goes through
    ``json.loads``."""
    if len(fields) == 4 and fields[0] == "e" and fields[2] == "d":
        raw = fields[3]
        if (
            fields[1] == EVENT_TOKEN
            and raw.startswith(TOKEN_HEAD)
            and raw.endswith(TOKEN_TAIL)
            and "\\" not in raw
        ):
            text = raw[len(TOKEN_HEAD) : -len(TOKEN_TAIL)]
            if '"' not in text:
                return Event(id=entry_id, type=EVENT_TOKEN, data={"t": text})
        return Event(id=entry_id, type=fields[1], data=json.loads(raw))
    return event_parse(entry_id, dict(zip(fields[::2], fields[1::2], strict=True)))


def event_parse(entry_id: Any, fields: dict[Any, Any]) -> Event:
    """Decode a raw ``(id, fields)`` stream entry (bytes or str) into an :class:`Event`."""

    def _s(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else v

    norm = {_s(k): _s(v) for k, v in fields.items()}
    return Event(
        id=_s(entry_id), type=norm.get("e", ""), data=json.loads(norm.get("d", "{}"))
    )

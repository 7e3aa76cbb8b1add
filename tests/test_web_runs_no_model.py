"""The web tier runs no model (DESIGN §2, §3): a turn that uses the user's memory
facts, a document's passages and the semantic cache, sent through a live web process
(uvicorn), gets its vectors from the embedding worker process; the web process never
imports torch or sentence-transformers, nor maps libtorch.

The web process runs :mod:`tests.asgi_probe` (the site plus one path answering its
``sys.modules``). The chat worker starts only after the first turn is queued, so the
test reads the exact prompt the worker is given: the facts and passages are in it
(memory was not silently skipped)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conversations.models import Message
from gateway.models import SemanticCacheEntry, UserPreference
from inference import keys, protocol
from inference.connections import redis_sync
from memory import services as memory_services
from memory.models import Citation, Document
from memory.quoting import FACTS_HEADER, SOURCES_HEADER
from tests.asgi_probe import PROBE_PATH
from tests.conftest import fake_heartbeat, fake_heartbeat_stop
from tests.sse import parse_frames
from tests.stack import stack_env, web_process, worker_processes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

POOL = "default"
CHAT_WORKER = ["--pool", POOL, "--engine", "scripted", "--delay-ms", "1"]
EMBED_WORKER = ["--engine", "sentence-transformers"]
# Modules (top-level names) a web process must never load; a model's shared library.
MODEL_MODULES = ("torch", "sentence_transformers")
MODEL_LIBRARY = "libtorch"

FACT = "I grow San Marzano tomatoes in my greenhouse."
DOCUMENT = (
    "Greenhouse care notes. Water the tomato plants in the greenhouse every morning "
    "before 8 am, with rainwater from the north tank. In hot weeks water them twice "
    "a day and open the roof vents."
)
QUESTION = "How often should I water the tomatoes in my greenhouse?"
# Unrelated to the fact and the document: a non-personal first turn, which the
# semantic cache looks up (embedding the question) and stores.
GENERAL = "What is the capital city of France?"


def _login(http: httpx.Client, base: str) -> None:
    http.get("/login/")
    login = http.post(
        "/login/",
        data={
            "username": "alice",
            "password": "pw-alice-123",
            "csrfmiddlewaretoken": http.cookies["csrftoken"],
        },
        headers={"Referer": base + "/login/"},
    )
    assert login.status_code == 302, login.text


def _send(http: httpx.Client, base: str, content: str) -> dict[str, Any]:
    """POST a message in a new conversation, as the chat page does; the turn's JSON."""
    response = http.post(
        "/c/messages/",
        data={"content": content},
        headers={"X-CSRFToken": http.cookies["csrftoken"], "Referer": base + "/"},
    )
    assert response.status_code == 201, response.text
    return response.json()


def _answer(http: httpx.Client, turn: dict[str, Any]) -> Message:
    """Read the turn's SSE stream to its ``done``; return the stored answer."""
    events, buffer = [], ""
    url = turn["assistant_message"]["stream_url"]
    with http.stream("GET", url, timeout=60) as stream:
        for chunk in stream.iter_text():
            buffer += chunk
            new, _comments, buffer = parse_frames(buffer)
            events.extend(new)
            if any(e.event in ("done", "error") for e in events):
                break
    assert events and events[-1].event == "done", events[-1:]
    return Message.objects.get(id=turn["assistant_message"]["id"])


def _queued_job(pool: str, timeout_s: float = 10.0) -> protocol.Job:
    """The one job waiting in ``pool``'s queue (no worker has taken it)."""
    deadline = time.monotonic() + timeout_s
    while not (entries := redis_sync().xrange(keys.queue_key(pool))):
        assert time.monotonic() < deadline, "no job was queued"
        time.sleep(0.05)
    assert len(entries) == 1
    return protocol.Job.from_fields(entries[0][1])


def test_a_turn_with_memory_and_the_semantic_cache_loads_no_model_in_the_web_process(
    user,
):
    env = stack_env()
    with (
        web_process(env, app="tests.asgi_probe:application") as web,
        worker_processes([EMBED_WORKER], env),
    ):
        # The user's memory, embedded by the worker process (this one loads no model).
        memory_services.fact_add(user=user, text=FACT)
        upload = memory_services.document_upload(
            user=user,
            name="greenhouse.txt",
            data=DOCUMENT.encode(),
            ingest_on_commit=False,
        )
        document = memory_services.document_ingest(document_id=upload.id)
        assert document.status == Document.Status.READY
        UserPreference.objects.create(user=user, reuse_cached_answers=True)

        with httpx.Client(base_url=web.base, timeout=30) as http:
            _login(http, web.base)
            # Admit the turn while no chat worker runs: its job waits in the queue.
            fake_heartbeat(POOL)
            personal = _send(http, web.base, QUESTION)
            job = _queued_job(POOL)
            fake_heartbeat_stop(POOL)
            with worker_processes([CHAT_WORKER], env):
                answer = _answer(http, personal)
                general = _answer(http, _send(http, web.base, GENERAL))
            probe = http.get(PROBE_PATH).json()
        maps = Path(f"/proc/{web.process.pid}/maps").read_text()

    # The prompt carried the fact and the document's passage; the answer cites it.
    system, question = job.messages[0]["content"], job.messages[-1]["content"]
    assert FACTS_HEADER in system and FACT in system
    assert question.startswith(SOURCES_HEADER) and DOCUMENT in question
    assert answer.status == Message.Status.COMPLETE and not answer.memory_unavailable
    cited = Citation.objects.filter(message_id=answer.id)
    assert [c.chunk.document_id for c in cited] == [document.id]
    # The general question went through the semantic cache: looked up, then stored.
    assert general.status == Message.Status.COMPLETE
    assert not general.memory_unavailable
    assert not Citation.objects.filter(message_id=general.id).exists()
    entry = SemanticCacheEntry.objects.get(user=user)
    assert entry.prompt == GENERAL and entry.answer == general.content
    # ... and the web process that did all this loaded no model.
    assert probe["pid"] == web.process.pid
    loaded = {name.split(".", 1)[0] for name in probe["modules"]}
    assert "django" in loaded and "memory" in loaded  # the probe saw the real process
    assert loaded.isdisjoint(MODEL_MODULES), sorted(loaded & set(MODEL_MODULES))
    assert MODEL_LIBRARY not in maps

"""Start and follow an API generation: thin adapters over the gateway's lifecycle.

:func:`completion_start` admits and enqueues a completion's generation through
:func:`gateway.generations.generation_start` (the chat turn's path); the answer is
followed with :func:`gateway.generations.generation_follow` (not resumable: a client
that leaves has its job cancelled and settled once) and rendered as OpenAI chunks
(:func:`completion_stream`) or one completion (:func:`completion_collect`). Outcomes
(status, finish reason, billing) come from the gateway's one map, so the API and the
chat page can never disagree on them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User

from chatsite.db import request_thread_release
from chatsite.errors import DomainError, NotFound, error_json
from conversations.openai import chunks
from conversations.openai.requests import CompletionRequest
from gateway import generations
from gateway import selectors as gateway_selectors
from gateway.cache import CachePolicy
from gateway.requestrate import RequestCounter
from inference.embeddings import TextVector
from inference.tokens import prompt_counter

Generation = generations.Generation
# OpenAI's finish reason of an answer cut by output moderation
CONTENT_FILTER = "content_filter"


def _model_check(model: str) -> None:
    """Accept only the ids ``GET /v1/models`` lists: pool names (a pool's model name,
    such as the GGUF file's, is not an id). With no chat pool in the database only
    the default pool's name is a chat model. Raises NotFound (404 ``model_not_found``).
    """
    known = gateway_selectors.pool_get(name=model) is not None or (
        model == settings.INFERENCE_DEFAULT_POOL
        and not gateway_selectors.chat_pools_defined()
    )
    if not known:
        exc = NotFound(
            f"The model “{model}” does not exist or is not available (see GET "
            "/v1/models for the ids you may use).",
            code="model_not_found",
        )
        exc.param = "model"
        raise exc


def prompt_tokens_count(messages: list[dict[str, Any]]) -> int:
    """Return the prompt's tokens by the serving model's tokenizer and chat template
    (the one chat turns are built with, MEMORY_TOKENIZER_ENGINE). With llama.cpp
    only the messages this process has not counted before are tokenized
    (:mod:`inference.engines.llamacpp_counts`): a client that resends its history
    pays for its new message (~0.1 ms for a short one; ~1.3 µs per token).

    The template matters: SmolLM2's adds its own system prompt when a request has
    none, so "hi" is 31 prompt tokens where the character estimate says 7.
    """
    return prompt_counter(settings.MEMORY_TOKENIZER_ENGINE)(messages)


def _cache_policy(
    req: CompletionRequest, *, query: TextVector | None = None
) -> CachePolicy | None:
    """The answer caches (:mod:`gateway.cache`) an API request may use.

    At temperature 0 the exact cache (an identical request gets the identical answer);
    with ``cache`` true also at other temperatures, and then a single-turn prompt may
    use the semantic cache too (an API request carries no personal context: no memory
    is injected). The semantic cache is approximate and embedding the prompt costs
    ~13 ms of CPU, so temperature 0 alone does not use it. ``cache`` false: none.
    """
    if req.cache is False:
        return None
    return CachePolicy(
        single_turn=True,
        personal=False,
        opt_in=bool(req.cache),
        semantic=bool(req.cache),
        query=query,
    )


def completion_start(
    *, user: User, req: CompletionRequest, counter: RequestCounter | None = None
) -> Generation:
    """Admit, reserve and enqueue the generation of the completion ``req``; nothing
    stays reserved if it raises. A cache hit is served by the gateway without a job.
    ``counter``: the request, still to count against its requests per minute (the
    reservation counts it: :attr:`gateway.generations.GenerationRequest.request_count`).
    Raises the gateway's DomainErrors (ModerationBlocked, ModerationUnavailable,
    ContextOverflow, NotFound, Forbidden, QuotaExceeded, PoolSaturated).

    The client wrote every message, so input moderation screens them all
    (``client_authored``); the last user message is embedded at most once, shared by
    input moderation and the semantic cache (as a chat turn shares its question's
    vector)."""
    _model_check(req.model)
    counted = prompt_tokens_count(req.messages)
    query = TextVector(generations.last_user_text(req.messages))
    request = generations.GenerationRequest(
        user=user,
        messages=req.messages,
        # reserved: never below the character estimate (a pool serving another
        # model may tokenize differently); checked against the window: the count
        prompt_tokens=max(counted, generations.prompt_tokens_estimate(req.messages)),
        context_tokens=counted,
        params=req.params,
        surface=generations.Surface.API,
        query=query,
        client_authored=True,
        model=req.model,
        cache_policy=_cache_policy(req, query=query),
        max_tokens_strict=True,
        request_count=counter,
    )
    started = generations.generation_start(request)
    generation = started.generation
    generation.model = started.admission.model or req.model
    return generation


async def admission_abandon(
    admission: asyncio.Future[tuple[Generation, CompletionRequest]],
) -> None:
    """The client left while its request was being admitted: wait for the admission
    step to end and, if it started a generation, cancel and settle it once."""
    try:
        generation, _req = await admission
    except Exception:  # rejected (DomainError) or failed: nothing was left running
        return
    await generations.generation_leave(generation)


def tools_forced(params: dict[str, Any]) -> bool:
    """Whether a request must call a tool (``tool_choice`` ``required`` or a named
    function, with ``tools``): its answer is held to a grammar built from the
    client's JSON Schemas, which an engine may refuse before the first token."""
    choice = params.get("tool_choice")
    return bool(params.get("tools")) and (
        choice == "required" or isinstance(choice, dict)
    )


_SHOWN = (
    generations.Delta,
    generations.ToolCall,
    generations.Broken,
    generations.Ended,
)


async def completion_first(
    generation: Generation,
) -> tuple[AsyncGenerator[Any, None], list[Any], DomainError | None]:
    """Follow ``generation`` up to its first item a client would see (text, a call's
    piece, its end); return the follower, the items read, and the error when it ended
    before any output with a client error (status < 500: a JSON Schema the engine
    cannot turn into a grammar), which the caller answers instead of a stream. The
    follower is closed when the error is returned or this is cancelled."""
    items = generations.generation_follow(generation)
    held: list[Any] = []
    try:
        async for item in items:
            held.append(item)
            if isinstance(item, _SHOWN):
                break
    except BaseException:
        await items.aclose()
        raise
    last = held[-1] if held else None
    if isinstance(last, generations.Ended):
        error = last.outcome.error
        if error is not None and error.status < 500:
            await items.aclose()
            return items, held, error
    return items, held, None


async def completion_stream(
    generation: Generation,
    include_usage: bool,
    *,
    items: AsyncGenerator[Any, None] | None = None,
    held: list[Any] | None = None,
) -> AsyncIterator[str]:
    """Yield the SSE lines of a streamed completion: a role chunk, one chunk per text
    delta and per tool-call piece (:func:`chunks.tool_call_delta`), the finish chunk,
    the usage chunk (``include_usage``), ``data: [DONE]``. A generation that fails, or
    a stream that breaks, ends with an error object. ``items`` and ``held``: the
    follower and the items :func:`completion_first` read already (default: follow
    from the start).
    """
    await request_thread_release()  # no connection or thread held while waiting
    cid = chunks.completion_id(generation.job_id)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return chunks.chunk_json(
            cid=cid,
            created=generation.created,
            model=generation.model,
            delta=delta,
            finish_reason=finish,
            include_usage=include_usage,
        )

    def lines(item: Any) -> tuple[list[str], bool]:
        """The SSE lines of ``item`` and whether the stream ends with them."""
        if isinstance(item, generations.Delta):
            return [chunks.data_line(chunk({"content": item.text}))], False
        if isinstance(item, generations.ToolCall):
            delta = chunks.tool_call_delta(
                index=item.index, arguments=item.arguments, id=item.id, name=item.name
            )
            return [chunks.data_line(chunk(delta))], False
        if isinstance(item, generations.Broken):
            return [chunks.data_line(error_json(item.error, openai=True))], True
        if not isinstance(item, generations.Ended):
            return [], False
        outcome = item.outcome
        if outcome.error is not None:
            return [chunks.data_line(error_json(outcome.error, openai=True))], True
        generation.model = outcome.model or generation.model
        finish = chunk({}, outcome.openai_finish_reason)
        if outcome.openai_finish_reason == CONTENT_FILTER:
            finish["content_filter"] = chunks.moderation_json(cid, outcome.reason)
        out = [chunks.data_line(finish)]
        if include_usage:
            out.append(
                chunks.data_line(
                    chunks.usage_chunk_json(
                        cid=cid,
                        created=generation.created,
                        model=generation.model,
                        usage=outcome.usage,
                    )
                )
            )
        out.append(chunks.DONE_LINE)
        return out, True

    yield chunks.data_line(chunk({"role": "assistant", "content": ""}))
    follower = items if items is not None else generations.generation_follow(generation)
    async with aclosing(follower) as following:
        for item in held or ():
            out, ended = lines(item)
            for line in out:
                yield line
            if ended:
                return
        async for item in following:
            out, ended = lines(item)
            for line in out:
                yield line
            if ended:
                return


async def completion_collect(generation: Generation) -> dict[str, Any]:
    """Wait for the whole answer; return one ``chat.completion`` object.

    Raises the generation's error (:class:`gateway.generations.GenerationFailed`) if
    it failed, or a retryable ServiceUnavailable if its stream broke.
    """
    parts: list[str] = []
    async with aclosing(generations.generation_follow(generation)) as items:
        async for item in items:
            if isinstance(item, generations.Delta):
                parts.append(item.text)
            elif isinstance(item, generations.Broken):
                raise item.error
            elif isinstance(item, generations.Ended):
                outcome = item.outcome
                break
    if outcome.error is not None:
        raise outcome.error
    cid = chunks.completion_id(generation.job_id)
    finish_reason = outcome.openai_finish_reason or ""
    return chunks.completion_json(
        cid=cid,
        created=generation.created,
        model=outcome.model or generation.model,
        content="".join(parts),
        finish_reason=finish_reason,
        usage=outcome.usage,
        tool_calls=outcome.tool_calls,
        moderation=chunks.moderation_json(cid, outcome.reason)
        if finish_reason == CONTENT_FILTER
        else None,
    )

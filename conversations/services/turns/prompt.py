"""Build a turn's prompt and the generation request that carries it (no lock held).

The prompt (:func:`prompt_build`) is memory and retrieval under the token budget
(:func:`memory.context.turn_context`): I/O that runs before anything is stored, so no
row is locked while it runs. :func:`generation_request` turns it into the
:class:`gateway.generations.GenerationRequest` the gateway admits.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from conversations import prompt_history, selectors
from conversations.models import Conversation, DocumentScope, Message
from conversations.services.scope import Scope
from conversations.services.turns.request import TurnRequest
from gateway import generations
from gateway.cache import CachePolicy
from inference.embeddings import TextVector
from inference.params import CONTINUE
from memory.context import BuiltContext, turn_context


def generation_params(params: dict[str, Any] | None) -> dict[str, Any]:
    """Return the sampling parameters of a turn: CHAT_MAX_TOKENS (tokens) and
    CHAT_TEMPERATURE, overridden by ``params``."""
    merged: dict[str, Any] = {
        "max_tokens": settings.CHAT_MAX_TOKENS,
        "temperature": settings.CHAT_TEMPERATURE,
    }
    merged.update(params or {})
    return merged


def scope_in_force(conversation: Conversation | None) -> Scope:
    """Return the document scope in force: the conversation's, or for a new one the
    CHAT_DOCUMENT_SCOPE_DEFAULT ("all" or "none")."""
    if conversation is None:
        kind = settings.CHAT_DOCUMENT_SCOPE_DEFAULT
        return Scope(kind=kind if kind == DocumentScope.NONE else DocumentScope.ALL)
    if conversation.doc_scope != DocumentScope.SOME:
        return Scope(kind=conversation.doc_scope)
    return Scope(
        kind=DocumentScope.SOME,
        document_ids=selectors.conversation_scope_ids(conversation=conversation),
    )


def prompt_build(
    turn: TurnRequest,
    *,
    scope: Scope,
    max_tokens: int,
    query: TextVector,
    tools: list[dict[str, Any]] | None = None,
    sources: tuple[bool, bool] | None = None,
) -> BuiltContext:
    """Build the prompt of the turn's answer to the token (memory.context.turn_context).

    The history is the branch from the root to ``turn.upto`` (never another branch's
    messages), with the rolling summary when it lies on that branch, plus
    ``turn.content`` when the turn sends a new message; trailing answers are dropped
    (a trailing round of tool calls and results, the turn's chain so far, is kept),
    then, for a turn that continues an answer, that answer's text.
    ``max_tokens`` is the answer's reserve, in tokens; ``query`` the question's shared
    embedding; ``scope`` the documents retrieval may search; ``tools`` the tool
    definitions offered, counted into the prompt's tokens; ``sources`` the user's
    memory sources, read already (:func:`conversations.turn_selectors.turn_reads`).
    """
    history: list[dict[str, Any]] = []
    summary, covers = "", 0
    if turn.conversation is not None:
        history, summary, covers = prompt_history.history_and_summary(
            conversation=turn.conversation, upto=turn.upto
        )
    if turn.content is not None:
        history.append({"role": Message.Role.USER, "content": turn.content})
    while history and history[-1]["role"] == Message.Role.ASSISTANT:
        history.pop()
    return turn_context(
        user_id=turn.user.pk,
        system_prompt=settings.CHAT_SYSTEM_PROMPT,
        history=history,
        max_tokens=max_tokens,
        summary=summary,
        summary_covers=min(covers, len(history)),
        query=query,
        document_ids=scope.retrieval_ids(),
        tools=tools,
        # the start of the assistant's turn (prefill) that a continuation writes on
        continued=turn.continues.content if turn.continues is not None else None,
        sources=sources,
    )


def cache_policy(
    built: BuiltContext, *, query: TextVector, lookup: bool, opt_in: bool = False
) -> CachePolicy:
    """Return how a turn may use the gateway's answer caches (gateway.cache).

    The semantic cache needs a first turn without memory; ``lookup`` False
    (regenerate) never serves one; ``opt_in`` (the user's "Reuse cached answers"
    preference) lets a turn at CHAT_TEMPERATURE > 0 use them at all.
    """
    return CachePolicy(
        single_turn=built.history_kept == 1
        and built.history_dropped == 0
        and not built.summary_used,
        personal=bool(built.facts or built.passages or built.summary_used),
        opt_in=opt_in,
        lookup=lookup,
        query=query,
    )


def tools_params(
    tools: list[dict[str, Any]], *, forced: str | None = None
) -> dict[str, Any]:
    """Return the generation parameters that offer ``tools`` (OpenAI definitions):
    ``tools`` and ``tool_choice`` — ``"auto"``, or the named function ``forced`` (the
    model must call it; llama.cpp constrains the call by a grammar built from its
    schema); none when ``tools`` is empty."""
    if not tools:
        return {}
    if forced is not None:
        choice: Any = {"type": "function", "function": {"name": forced}}
        return {"tools": tools, "tool_choice": choice}
    return {"tools": tools, "tool_choice": "auto"}


def generation_request(
    turn: TurnRequest,
    built: BuiltContext,
    *,
    params: dict[str, Any],
    model: str | None,
    query: TextVector,
    opt_in: bool,
    tools: list[dict[str, Any]] | None = None,
    forced_tool: str | None = None,
) -> generations.GenerationRequest:
    """Return the gateway request for the turn's answer to the prompt ``built``.

    The prompt is reserved and checked against the pool's window at its exact count
    (``built.prompt_tokens``, the serving tokenizer's); input moderation reads
    ``query``, the same vector as memory and the semantic cache. ``params`` the
    sampling parameters, ``model`` an explicit pool/model choice (None: routing),
    ``opt_in`` the user's cache preference. ``tools`` (OpenAI definitions) are offered
    with ``tool_choice: "auto"`` when the routed engine implements tools (dropped
    otherwise; ``built`` counted them, :func:`prompt_build`); a turn offered tools
    never uses the answer caches (a cached answer has no tool calls), nor does a
    continuation (``continue_final_message``: the engine writes on the prompt's last
    message, :data:`inference.params.CONTINUE`).
    ``forced_tool`` (one of ``tools``, the user's pick for the message) makes the
    choice that named function: no longer an offer the engine may drop, so an engine
    without tools is a 400 (:func:`gateway.generations.params_fit.params_check`).
    """
    conversation, question = turn.conversation, turn.question
    tools = tools or []
    # a continuation writes on the prompt's last (assistant) message
    opening = {CONTINUE: True} if turn.continues is not None else {}
    return generations.GenerationRequest(
        user=turn.user,
        messages=built.messages,
        prompt_tokens=built.prompt_tokens,
        context_tokens=built.prompt_tokens,
        params={**params, **tools_params(tools, forced=forced_tool), **opening},
        tools_optional=bool(tools) and forced_tool is None,
        surface=generations.Surface.CHAT,
        query=query,
        conversation_id=conversation.pk if conversation is not None else None,
        message_id=question.pk if question is not None else None,
        model=model,
        cache_policy=None
        if tools or turn.last is not None or turn.continues is not None
        else cache_policy(
            built,
            query=query,
            # the user asks for a new answer: never a cached one (a complete new
            # answer replaces the cached one)
            lookup=turn.content is not None,
            opt_in=opt_in,
        ),
    )

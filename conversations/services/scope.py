"""A conversation's document scope: which of the user's documents its answers may
quote ("Documents in chat", docs/memory.md): all of them, none, or the chosen ones.

The scope is stored on the conversation (``doc_scope`` + ``scope_documents``) and read
by every turn of it (:mod:`conversations.services.turns`), which passes it to retrieval
(:func:`memory.context.turn_context`). A new chat gets the scope sent with its first
message, or CHAT_DOCUMENT_SCOPE_DEFAULT.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from chatsite.errors import InvalidInput, NotFound
from conversations import selectors
from conversations.models import Conversation, DocumentScope
from memory import selectors as memory_selectors

MAX_CHOSEN = 200  # documents one scope may name (a bound on the request, not a quota)


@dataclass(frozen=True)
class Scope:
    """A validated document scope: ``kind`` all/none/some, ``document_ids`` for some."""

    kind: str = DocumentScope.ALL
    document_ids: list[int] = field(default_factory=list)

    def retrieval_ids(self) -> list[int] | None:
        """The ``document_ids`` argument of retrieval: None = all, [] = none."""
        if self.kind == DocumentScope.ALL:
            return None
        if self.kind == DocumentScope.NONE:
            return []
        return list(self.document_ids)


def scope_parse(*, user: User, kind: Any, document_ids: Iterable[Any]) -> Scope:
    """Validate a scope sent by the user; return it.

    ``kind`` is "all", "none" or "some"; ``document_ids`` (ids of the user's documents)
    count only for "some", which needs at least one. Raises InvalidInput (unknown kind,
    a non-numeric id, none chosen, more than MAX_CHOSEN) and NotFound (an id that is
    not one of the user's documents: another user's id reads as unknown).
    """
    if kind not in DocumentScope.values:
        raise InvalidInput(
            "Choose which documents to use: all, none or some.", code="invalid_scope"
        )
    if kind != DocumentScope.SOME:
        return Scope(kind=kind)
    try:
        ids = sorted({int(str(i)) for i in document_ids})
    except ValueError as exc:
        raise InvalidInput(
            "A chosen document id is not a number.", code="invalid_scope"
        ) from exc
    if not ids:
        raise InvalidInput(
            "Choose at least one document, or use none.", code="empty_scope"
        )
    if len(ids) > MAX_CHOSEN:
        raise InvalidInput(
            f"Choose at most {MAX_CHOSEN} documents.", code="invalid_scope"
        )
    if memory_selectors.documents_owned(user=user, ids=ids) != ids:
        raise NotFound("One of the chosen documents does not exist.")
    return Scope(kind=kind, document_ids=ids)


def scope_store(*, conversation: Conversation, scope: Scope) -> None:
    """Write ``scope`` onto ``conversation`` (its kind and chosen documents)."""
    with transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk).update(doc_scope=scope.kind)
        conversation.doc_scope = scope.kind
        conversation.scope_documents.set(scope.document_ids)


def conversation_scope_set(
    *,
    user: User,
    conversation_id: Any,
    kind: Any,
    document_ids: Iterable[Any],
) -> Conversation:
    """Set which documents the user's conversation searches; return the conversation.

    Raises NotFound (not the user's conversation, or a document that is not theirs)
    and InvalidInput (see :func:`scope_parse`); nothing is stored when it raises.
    """
    conversation = selectors.conversation_get(
        user=user, conversation_id=conversation_id
    )
    scope = scope_parse(user=user, kind=kind, document_ids=document_ids)
    scope_store(conversation=conversation, scope=scope)
    return conversation

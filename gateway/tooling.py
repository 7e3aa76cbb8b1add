"""Tools that need the layers under gateway together: ``search_documents`` searches
the user's own documents (memory/ retrieval) and is registered into the tool registry
(tools/registry.py) by gateway's app at ready."""

from __future__ import annotations

import html
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from inference.embeddings import EmbeddingUnavailable, TextVector
from memory import selectors as memory_selectors
from memory.context import passage_max_distance
from memory.quoting import passage_quote
from tools.registry import Tool, ToolContext, ToolResult, tool_register

__all__ = ["SEARCH_DOCUMENTS", "documents_search", "tooling_register"]


def documents_search(
    *, user_id: int, query: str, document_ids: tuple[int, ...] | None
) -> list[dict[str, Any]]:
    """Return the user's passages nearest to ``query``: ``[{document_id, title,
    text, score}]``, best first, at most TOOLS_DOCUMENTS_K, each at least
    MEMORY_RETRIEVE_MIN_SCORE similar. Only ``user_id``'s documents, and of them only
    the conversation's scope ``document_ids`` (None: all, empty: none). Raises
    :class:`inference.embeddings.EmbeddingUnavailable` without an embedding worker."""
    if document_ids is not None and not document_ids:
        return []
    vector = TextVector(query).vector
    hits = memory_selectors.chunks_search(
        user=user_id,
        vector=vector,
        k=int(settings.TOOLS_DOCUMENTS_K),
        max_distance=passage_max_distance(),
        ef_search=settings.MEMORY_HNSW_EF_SEARCH,
        document_ids=document_ids,
    )
    return [
        {
            "document_id": h.chunk.document_id,
            "title": h.chunk.document.title,
            "text": h.chunk.text,
            "score": round(1.0 - h.distance, 4),
        }
        for h in hits
    ]


async def search_documents(
    arguments: dict[str, Any], context: ToolContext
) -> ToolResult:
    """Run ``search_documents`` for ``context``'s user and document scope."""
    try:
        passages = await sync_to_async(documents_search)(
            user_id=context.user_id,
            query=arguments["query"],
            document_ids=context.document_ids,
        )
    except EmbeddingUnavailable:
        return ToolResult(
            text="The documents cannot be searched right now (no embedding service).",
            error=True,
        )
    if not passages:
        return ToolResult(text="No passage of the user's documents matches.")
    blocks = [
        f'<passage n="{n}" title="{html.escape(p["title"])}">\n'
        f"{passage_quote(p['text'])}\n</passage>"
        for n, p in enumerate(passages, 1)
    ]
    return ToolResult(text="\n".join(blocks), detail={"passages": passages})


def _label(arguments: dict[str, Any], result: ToolResult | None) -> str:
    if result is None:
        return f"Searching your documents for “{arguments.get('query', '')}”"
    count = len(result.detail.get("passages", []))
    return f"Read {count} passage{'' if count == 1 else 's'}"


SEARCH_DOCUMENTS = Tool(
    name="search_documents",
    description=(
        "Search the user's own uploaded documents (those this conversation may use) "
        "and return the most relevant passages with their document titles."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What to find."}
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    label=_label,
    run=search_documents,
    wall_s=lambda: float(settings.TOOLS_DOCUMENTS_TIMEOUT_S),
)


def tooling_register() -> None:
    """Register the gateway's tools into the registry."""
    tool_register(SEARCH_DOCUMENTS)

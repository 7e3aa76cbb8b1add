"""Web search through SearxNG's JSON API: ``GET {TOOLS_SEARCH_URL}/search?q=…&format=json``.

The backend is the operator's (TOOLS_SEARCH_URL; unset: ``web_search`` is not
offered), so its address is not put through fetch_url's address policy. At most
TOOLS_SEARCH_MAX_RESULTS hits are returned, each snippet cut at
TOOLS_SEARCH_SNIPPET_CHARS characters; the request stops at TOOLS_SEARCH_TIMEOUT_S
seconds and reads at most TOOLS_SEARCH_MAX_BYTES of the answer.
"""

from __future__ import annotations

import json

import httpx
from django.conf import settings

__all__ = ["SearchFailed", "web_search_run"]


class SearchFailed(RuntimeError):
    """The search backend is not configured, unreachable, slow or answered badly."""


async def web_search_run(query: str) -> list[dict[str, str]]:
    """Return the top hits for ``query``: ``[{title, url, snippet}]``, best first.

    Raises :class:`SearchFailed` when TOOLS_SEARCH_URL is unset, the request fails or
    times out, the status is not 200, or the body is over TOOLS_SEARCH_MAX_BYTES or
    not SearxNG's JSON.
    """
    base = str(settings.TOOLS_SEARCH_URL).rstrip("/")
    if not base:
        raise SearchFailed("no search backend is configured")
    cap = int(settings.TOOLS_SEARCH_MAX_BYTES)
    body = bytearray()
    try:
        async with httpx.AsyncClient(
            trust_env=False, timeout=float(settings.TOOLS_SEARCH_TIMEOUT_S)
        ) as client:
            async with client.stream(
                "GET",
                f"{base}/search",
                params={"q": query, "format": "json"},
                headers={"Accept": "application/json"},
            ) as response:
                if response.status_code != 200:
                    raise SearchFailed(
                        f"the backend answered HTTP {response.status_code}"
                    )
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > cap:
                        raise SearchFailed(f"the answer is over {cap} bytes")
    except httpx.HTTPError as exc:
        raise SearchFailed(f"the backend could not be reached: {exc}") from exc
    try:
        results = json.loads(body)["results"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SearchFailed("the backend's answer is not SearxNG JSON") from exc
    snippet_cap = int(settings.TOOLS_SEARCH_SNIPPET_CHARS)
    hits = []
    for item in results[: int(settings.TOOLS_SEARCH_MAX_RESULTS)]:
        if not isinstance(item, dict):
            continue
        hits.append(
            {
                "title": str(item.get("title") or ""),
                "url": str(item.get("url") or ""),
                "snippet": str(item.get("content") or "")[:snippet_cap],
            }
        )
    return hits

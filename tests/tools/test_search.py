"""tools/search.py and the web_search tool against a fake SearxNG on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from tools.builtin import WEB_SEARCH, builtin_offered
from tools.registry import ToolContext, tool_run

CONTEXT = ToolContext(user_id=1)


class Searx(ThreadingHTTPServer):
    """SearxNG's /search?format=json with ``count`` results; records the queries."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.queries: list[dict[str, list[str]]] = []
        self.status = 200

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Searx

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        self.server.queries.append(query)
        results = [
            {
                "title": f"Result {n}",
                "url": f"https://example.org/{n}",
                "content": f"snippet {n} " + "x" * 1000,
            }
            for n in range(20)
        ]
        body = json.dumps({"query": query.get("q", [""])[0], "results": results})
        self.send_response(self.server.status if url.path == "/search" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())


@pytest.fixture
def searx() -> Iterator[Searx]:
    server = Searx()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_web_search_is_offered_only_when_a_backend_is_set(settings):
    settings.TOOLS_SEARCH_URL = ""
    assert not builtin_offered("web_search")
    settings.TOOLS_SEARCH_URL = "http://127.0.0.1:1"
    assert builtin_offered("web_search")


async def test_results_come_capped_as_title_url_snippet(searx, settings):
    settings.TOOLS_SEARCH_URL = searx.base + "/"
    settings.TOOLS_SEARCH_MAX_RESULTS = 3
    settings.TOOLS_SEARCH_SNIPPET_CHARS = 50
    result = await tool_run(
        WEB_SEARCH, arguments={"query": "pgvector hnsw"}, context=CONTEXT
    )
    assert not result.error, result.text
    assert searx.queries == [{"q": ["pgvector hnsw"], "format": ["json"]}]
    hits = result.detail["results"]
    assert [h["title"] for h in hits] == ["Result 0", "Result 1", "Result 2"]
    assert hits[0]["url"] == "https://example.org/0"
    assert all(len(h["snippet"]) == 50 for h in hits)
    assert "https://example.org/2" in result.text
    assert "Result 3" not in result.text
    label = WEB_SEARCH.label({"query": "pgvector hnsw"}, result)
    assert label == "Searched the web for “pgvector hnsw”"


async def test_a_failing_backend_is_an_error_result(searx, settings):
    settings.TOOLS_SEARCH_URL = searx.base
    searx.status = 502
    result = await tool_run(WEB_SEARCH, arguments={"query": "q"}, context=CONTEXT)
    assert result.error
    assert "HTTP 502" in result.text


async def test_an_unreachable_backend_is_an_error_result(settings):
    settings.TOOLS_SEARCH_URL = "http://127.0.0.1:1"
    result = await tool_run(WEB_SEARCH, arguments={"query": "q"}, context=CONTEXT)
    assert result.error
    assert "could not be reached" in result.text

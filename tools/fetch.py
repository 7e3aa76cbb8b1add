"""Fetch a web page as text: the ``fetch_url`` tool (DESIGN §13).

:func:`url_fetch` follows a URL through at most ``max_redirects`` redirects. For each
hop it checks the scheme (http, https) and refuses credentials in the URL, resolves
the host and checks every address (:mod:`tools.addresses`: no loopback, private,
link-local or metadata address unless the allow-list names it), then connects to
that checked address itself (the URL's host replaced by it; the Host header and TLS
SNI and certificate check keep the name), so a second DNS answer cannot send the
request elsewhere. Environment proxies are ignored for the same reason. At most
``max_bytes`` of the body are read and the whole fetch stops at ``timeout_s``; HTML
becomes text with html-text (lxml; scripts and styles dropped, block elements on
lines of their own), other text types are decoded as they are, anything else is
refused. The text is cut at ``max_chars``.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field

import httpx

from tools.addresses import AllowList, FetchRefused, host_check

__all__ = ["FetchFailed", "FetchLimits", "FetchRefused", "FetchResult", "url_fetch"]

MIB = 1 << 20
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/x-yaml"})


class FetchFailed(RuntimeError):
    """The fetch was allowed but did not succeed: no connection, a timeout, a
    protocol error."""


@dataclass(frozen=True)
class FetchLimits:
    """Bounds of one fetch: ``timeout_s`` of wall-clock time for all hops, s;
    ``max_bytes`` of body read; ``max_chars`` of text returned; ``max_redirects``
    followed; ``allow``: the non-public addresses it may reach anyway; ``ca_file``:
    a PEM file of the certificate authorities to trust (an internal CA) instead of
    httpx's default, certifi's bundle; empty for the default."""

    timeout_s: float = 10.0
    max_bytes: int = 2 * MIB
    max_chars: int = 20_000
    max_redirects: int = 5
    allow: AllowList = field(default_factory=AllowList)
    user_agent: str = "chatsite-fetch/1 (+fetch_url tool)"
    ca_file: str = ""

    @classmethod
    def from_settings(cls) -> FetchLimits:
        """Return the limits of the ``TOOLS_FETCH_*`` Django settings."""
        from django.conf import settings

        return cls(
            timeout_s=settings.TOOLS_FETCH_TIMEOUT_S,
            max_bytes=settings.TOOLS_FETCH_MAX_BYTES,
            max_chars=settings.TOOLS_FETCH_MAX_CHARS,
            max_redirects=settings.TOOLS_FETCH_MAX_REDIRECTS,
            allow=AllowList.parse(settings.TOOLS_FETCH_ALLOW),
            user_agent=settings.TOOLS_FETCH_USER_AGENT,
            ca_file=settings.TOOLS_FETCH_CA_FILE,
        )


@dataclass(frozen=True)
class FetchResult:
    """A fetched page: the final ``url`` (after redirects), the HTTP ``status``, the
    media type (``content_type``, e.g. "text/html"), its ``text``, whether the body
    or the text was cut at a limit (``truncated``), the body bytes read and the
    whole fetch's time in ms."""

    url: str
    status: int
    content_type: str
    text: str
    truncated: bool
    bytes_read: int
    elapsed_ms: float


def url_check(url: httpx.URL) -> None:
    """Raise :class:`FetchRefused` unless ``url`` is http(s) with a host and no
    credentials."""
    if url.scheme not in ("http", "https"):
        raise FetchRefused(
            f"only http and https URLs may be fetched, not {url.scheme!r}"
        )
    if not url.host:
        raise FetchRefused("the URL has no host")
    if url.userinfo:
        raise FetchRefused("a URL with credentials is not fetched")


def url_fetch(url: str, *, limits: FetchLimits | None = None) -> FetchResult:
    """Fetch ``url`` and return its text; ``limits`` default to the settings.

    Raises :class:`FetchRefused` for a URL, an address (on any hop), a content type
    or a redirect chain the policy refuses, :class:`FetchFailed` when the fetch
    fails or runs past ``timeout_s``. An HTTP error status is a result, not raised.
    """
    limits = limits or FetchLimits.from_settings()
    started = time.monotonic()
    deadline = started + limits.timeout_s
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise FetchRefused(f"not a URL: {exc}") from exc
    verify = (
        ssl.create_default_context(cafile=limits.ca_file) if limits.ca_file else True
    )
    with httpx.Client(trust_env=False, follow_redirects=False, verify=verify) as client:
        for _hop in range(limits.max_redirects + 1):
            response = hop_send(client, target, limits=limits, deadline=deadline)
            try:
                location = response.headers.get("location")
                if response.is_redirect and location:
                    try:
                        target = target.join(location)
                    except httpx.InvalidURL as exc:
                        raise FetchRefused(f"a bad redirect: {exc}") from exc
                    continue
                return response_read(
                    response,
                    url=target,
                    limits=limits,
                    started=started,
                    deadline=deadline,
                )
            finally:
                response.close()
    raise FetchRefused(f"more than {limits.max_redirects} redirects")


def hop_send(
    client: httpx.Client, target: httpx.URL, *, limits: FetchLimits, deadline: float
) -> httpx.Response:
    """Check ``target`` and its addresses, then send the GET to the checked address;
    return the streamed response (the caller closes it)."""
    url_check(target)
    host = target.raw_host.decode("ascii")
    port = target.port or (443 if target.scheme == "https" else 80)
    address = host_check(host, port, allow=limits.allow)
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchFailed(f"the fetch took longer than {limits.timeout_s:g} s")
    request = client.build_request(
        "GET",
        target.copy_with(host=str(address)),
        headers={
            "Host": target.netloc.decode("ascii"),
            "User-Agent": limits.user_agent,
            "Accept": "text/html, text/plain;q=0.9, */*;q=0.1",
            "Accept-Encoding": "identity",
        },
        extensions={"sni_hostname": host},
        timeout=httpx.Timeout(left),
    )
    try:
        return client.send(request, stream=True)
    except httpx.TimeoutException as exc:
        raise FetchFailed(f"the fetch took longer than {limits.timeout_s:g} s") from exc
    except httpx.HTTPError as exc:
        raise FetchFailed(f"{target} could not be fetched: {exc}") from exc


def response_read(
    response: httpx.Response,
    *,
    url: httpx.URL,
    limits: FetchLimits,
    started: float,
    deadline: float,
) -> FetchResult:
    """Read at most ``max_bytes`` of ``response`` by ``deadline`` and return it as
    text; raise :class:`FetchRefused` for a type that is not text."""
    media = response.headers.get("content-type", "").split(";")[0].strip().lower()
    is_text = media.startswith("text/") or media in TEXT_TYPES
    if not (is_text or media in HTML_TYPES or media.endswith(("+json", "+xml"))):
        raise FetchRefused(f"{url} is {media or 'of no stated type'}, not text")
    body = bytearray()
    truncated = False
    try:
        for chunk in response.iter_bytes():
            body += chunk[: limits.max_bytes - len(body)]
            if len(body) >= limits.max_bytes:
                truncated = True
                break
            if time.monotonic() > deadline:
                raise FetchFailed(f"the fetch took longer than {limits.timeout_s:g} s")
    except httpx.TimeoutException as exc:
        raise FetchFailed(f"the fetch took longer than {limits.timeout_s:g} s") from exc
    except httpx.HTTPError as exc:
        raise FetchFailed(f"{url} could not be read: {exc}") from exc
    try:
        decoded = bytes(body).decode(response.charset_encoding or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        decoded = bytes(body).decode("utf-8", "replace")
    if media in HTML_TYPES:
        # imported here: the app registry loads this module (tools.builtin), and the
        # vLLM worker's venv carries the app's models but not the HTML reader
        import html_text

        text = html_text.extract_text(decoded)
    else:
        text = decoded
    if len(text) > limits.max_chars:
        text, truncated = text[: limits.max_chars], True
    return FetchResult(
        url=str(url),
        status=response.status_code,
        content_type=media,
        text=text,
        truncated=truncated,
        bytes_read=len(body),
        elapsed_ms=(time.monotonic() - started) * 1000,
    )

"""tools/fetch.py and tools/addresses.py: fetch_url refuses loopback, private,
link-local and metadata addresses (after DNS and on every redirect) unless the
allow-list names them, and bounds each fetch; pages come from a server on loopback."""

from __future__ import annotations

import ipaddress
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tools.addresses import AllowList, FetchRefused, address_public, host_check
from tools.fetch import FetchFailed, FetchLimits, url_fetch

PAGE = b"""<!doctype html><html><head><title>The title</title>
<style>body { color: red }</style><script>var secret = "in a script";</script></head>
<body><h1>Heading</h1><p>First paragraph with <a href="/x">a link</a>.</p>
<ul><li>one</li><li>two</li></ul></body></html>"""


class Site(ThreadingHTTPServer):
    """A small site on 127.0.0.1: pages, redirects, a big body, a slow body."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.paths: list[str] = []
        self.release = threading.Event()  # lets /slow finish

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a refused TLS handshake is the test's subject, not noise

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Site

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def send(self, status: int, body: bytes, ctype: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.paths.append(self.path)
        port = self.server.server_address[1]
        if self.path == "/page.html":
            self.send(200, PAGE, "text/html; charset=utf-8")
        elif self.path == "/plain":
            self.send(
                200, "naïve text".encode("latin-1"), "text/plain; charset=latin-1"
            )
        elif self.path == "/to-page":
            self.send(302, b"", "text/plain", Location="/page.html")
        elif self.path == "/to-other-loopback":
            self.send(
                302, b"", "text/plain", Location=f"http://127.0.0.2:{port}/page.html"
            )
        elif self.path == "/to-metadata":
            self.send(302, b"", "text/plain", Location="http://169.254.169.254/latest/")
        elif self.path.startswith("/loop"):
            self.send(302, b"", "text/plain", Location=f"/loop{len(self.server.paths)}")
        elif self.path == "/big":
            self.send(200, b"word " * 600_000, "text/plain")
        elif self.path == "/image":
            self.send(200, b"\x89PNG\r\n\x1a\n", "image/png")
        elif self.path == "/slow":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"start ")
            self.wfile.flush()
            self.server.release.wait(10)
            self.wfile.write(b"end")
        else:
            self.send(404, b"not here", "text/plain")


@pytest.fixture
def site() -> Iterator[Site]:
    server = Site()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


def loopback(**changes: object) -> FetchLimits:
    """Limits whose allow-list names 127.0.0.1 alone."""
    return FetchLimits(allow=AllowList.parse(["127.0.0.1/32"]), **changes)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.0.0.2",
        "::1",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",  # the cloud metadata service
        "fd00:ec2::254",  # AWS's metadata over IPv6
        "100.100.100.200",  # Alibaba's metadata (shared address space)
        "fe80::1",
        "0.0.0.0",
        "::",
        "::ffff:127.0.0.1",
        "224.0.0.1",
    ],
)
def test_non_public_addresses_are_not_public(address):
    assert not address_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address", ["93.184.215.14", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
)
def test_public_addresses_are_public(address):
    assert address_public(ipaddress.ip_address(address))


def test_a_name_resolving_to_loopback_is_refused_unless_allowed():
    with pytest.raises(FetchRefused, match="loopback"):
        host_check("localhost", 80, allow=AllowList())
    allowed = host_check("localhost", 80, allow=AllowList.parse(["localhost"]))
    assert allowed.is_loopback


def test_a_loopback_page_is_refused_without_the_allow_list_and_never_contacted(site):
    for url in (f"{site.base}/page.html", site.base.replace("127.0.0.1", "localhost")):
        with pytest.raises(FetchRefused, match="loopback"):
            url_fetch(url, limits=FetchLimits())
    with pytest.raises(FetchRefused, match="link-local"):
        url_fetch("http://169.254.169.254/latest/meta-data/", limits=FetchLimits())
    assert site.paths == []


def test_an_allowed_page_becomes_text_without_scripts_or_styles(site):
    result = url_fetch(f"{site.base}/page.html", limits=loopback())
    assert result.status == 200 and result.content_type == "text/html"
    assert result.text == (
        "The title\n\nHeading\n\nFirst paragraph with a link.\n\none\ntwo"
    )
    assert not result.truncated and result.bytes_read == len(PAGE)
    assert site.paths == ["/page.html"]


def test_plain_text_is_decoded_with_its_charset(site):
    result = url_fetch(f"{site.base}/plain", limits=loopback())
    assert result.text == "naïve text"


def test_redirects_are_followed_and_each_hop_is_checked_again(site):
    result = url_fetch(f"{site.base}/to-page", limits=loopback())
    assert result.url == f"{site.base}/page.html"
    assert "First paragraph" in result.text
    with pytest.raises(FetchRefused, match="127.0.0.2"):
        url_fetch(f"{site.base}/to-other-loopback", limits=loopback())
    with pytest.raises(FetchRefused, match="169.254.169.254"):
        url_fetch(f"{site.base}/to-metadata", limits=loopback())
    assert site.paths == [
        "/to-page",
        "/page.html",
        "/to-other-loopback",
        "/to-metadata",
    ]


def test_a_redirect_loop_stops_at_the_limit(site):
    with pytest.raises(FetchRefused, match="more than 3 redirects"):
        url_fetch(f"{site.base}/loop", limits=loopback(max_redirects=3))
    assert len(site.paths) == 4


def test_a_big_body_is_read_only_to_the_byte_limit_and_text_is_cut(site):
    result = url_fetch(f"{site.base}/big", limits=loopback(max_bytes=10_000))
    assert result.truncated and result.bytes_read == 10_000
    assert len(result.text) == 10_000
    result = url_fetch(f"{site.base}/big", limits=loopback(max_chars=50))
    assert result.truncated and result.text == "word " * 10


def test_a_slow_body_is_cut_at_the_time_limit(site):
    with pytest.raises(FetchFailed, match="longer than 0.5 s"):
        url_fetch(f"{site.base}/slow", limits=loopback(timeout_s=0.5))


def test_what_is_not_text_is_refused(site):
    with pytest.raises(FetchRefused, match="image/png"):
        url_fetch(f"{site.base}/image", limits=loopback())


def test_an_http_error_status_is_a_result(site):
    result = url_fetch(f"{site.base}/missing", limits=loopback())
    assert result.status == 404 and result.text == "not here"


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("file:///etc/passwd", "only http and https"),
        ("ftp://example.com/", "only http and https"),
        ("http://user:secret@example.com/", "credentials"),
        ("http:///nohost", "no host|not a URL"),
    ],
)
def test_other_schemes_and_credentials_are_refused(url, match):
    with pytest.raises(FetchRefused, match=match):
        url_fetch(url, limits=FetchLimits())


def test_nothing_listening_is_a_failure_not_a_refusal():
    with pytest.raises(FetchFailed):
        url_fetch("http://127.0.0.1:9/", limits=loopback(timeout_s=2))


def certificate_make(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for the DNS name ``name`` and its key, made with
    the openssl command."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}"]
        + ["-addext", f"subjectAltName=DNS:{name}"],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def tls_site(tmp_path) -> Iterator[tuple[Site, Path, Path]]:
    """The site over TLS with a certificate for "localhost", and a certificate for
    another name."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    cert, key = certificate_make(tmp_path, "localhost")
    other, _ = certificate_make(tmp_path, "other.test")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = Site()
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, cert, other
    finally:
        server.shutdown()
        server.server_close()


def test_https_goes_to_the_checked_address_and_verifies_the_name(tls_site):
    site, cert, other = tls_site
    url = f"https://localhost:{site.server_address[1]}/page.html"
    allow = AllowList.parse(["localhost"])
    result = url_fetch(url, limits=FetchLimits(allow=allow, ca_file=str(cert)))
    assert result.status == 200 and "First paragraph" in result.text
    # The connection is made to the address, the certificate checked against the name.
    with pytest.raises(FetchFailed, match="CERTIFICATE_VERIFY_FAILED"):
        url_fetch(url, limits=FetchLimits(allow=allow, ca_file=str(other)))
    assert site.paths == ["/page.html"]

"""Which network addresses the fetch_url tool may connect to (tools/fetch.py).

A fetched URL is the model's choice, and a page can redirect anywhere, so every hop's
host is resolved here and each of its addresses checked before anything connects: an
address that is not globally routable (loopback, private, link-local with the cloud
metadata service at 169.254.169.254, shared 100.64.0.0/10, unique-local IPv6 such as
fd00:ec2::254, multicast, reserved, unspecified; IPv4 mapped into IPv6 is judged as
the IPv4 address) is refused unless the allow-list names it. The caller then connects
to the checked address itself, never to a second resolution of the name (DNS
rebinding). The classification is Python's :mod:`ipaddress` (``is_global``, from
IANA's special-purpose address registries).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class FetchRefused(ValueError):
    """The URL is not one the tool may fetch: its scheme, its credentials, an address
    it resolves to, its content type or its redirects."""


@dataclass(frozen=True)
class AllowList:
    """Addresses a fetch may reach even though they are not global: ``networks``
    (CIDR blocks; a single address is a /32 or /128) and ``hosts`` (exact host
    names, lower case, each allowing whatever the name resolves to)."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """Return the allow-list of ``entries``: each a CIDR block, an address or a
        host name (``TOOLS_FETCH_ALLOW``)."""
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        for entry in (e.strip() for e in entries):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(tuple(networks), frozenset(hosts))

    def admits(self, address: IPAddress) -> bool:
        """Whether ``address`` is in one of the allowed networks."""
        return any(address in network for network in self.networks)


def address_public(address: IPAddress) -> bool:
    """Whether ``address`` is globally routable (and neither multicast, reserved nor
    unspecified); an IPv4-mapped IPv6 address is judged as its IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.is_global and not (
        address.is_multicast or address.is_reserved or address.is_unspecified
    )


def host_resolve(host: str, port: int) -> list[IPAddress]:
    """Return the addresses ``host`` (a name or an address literal) resolves to for
    TCP on ``port``, in the resolver's order; raise :class:`FetchRefused` when it
    does not resolve."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise FetchRefused(f"{host} does not resolve: {exc}") from exc
    found: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if address not in found:
            found.append(address)
    return found


def host_check(host: str, port: int, *, allow: AllowList) -> IPAddress:
    """Resolve ``host`` and return the address to connect to; raise
    :class:`FetchRefused` if any address it resolves to is neither public nor
    allowed (one bad record refuses the name: a resolver's order must not decide)."""
    addresses = host_resolve(host, port)
    if host.lower().rstrip(".") in allow.hosts:
        return addresses[0]
    for address in addresses:
        if not (address_public(address) or allow.admits(address)):
            raise FetchRefused(
                f"{host} resolves to {address}, a {address_kind(address)} address; "
                "only public addresses may be fetched (TOOLS_FETCH_ALLOW names "
                "exceptions)"
            )
    return addresses[0]


def address_kind(address: IPAddress) -> str:
    """A word for why ``address`` is not public, for the refusal's message."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    for kind in ("unspecified", "loopback", "link_local", "multicast", "private"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return "non-global"

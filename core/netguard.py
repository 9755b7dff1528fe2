"""Which network addresses the platform refuses to send requests to on a tenant's behalf: the http_request tool's
hosts and model providers' base URLs (server-side request forgery: a tenant must not reach the platform's own
network, its loopback or a cloud metadata service)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port) -> the addresses it resolves to; resolve_host unless a caller brings its own.
Resolver = Callable[[str, int], list[str]]

# Every range that is not the public internet (IANA special-purpose registries, IPv4 and IPv6).
DEFAULT_BLOCKED_NETWORKS = (
    "0.0.0.0/8",  # "this network", 0.0.0.0 included
    "10.0.0.0/8",
    "100.64.0.0/10",  # carrier-grade NAT
    "127.0.0.0/8",
    "169.254.0.0/16",  # link-local, cloud metadata services (169.254.169.254)
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, 255.255.255.255 included
    "::/96",  # unspecified, loopback and IPv4-compatible (IPv4-mapped ones are checked as the IPv4 they carry)
    "::ffff:0:0:0/96",  # IPv4-translated (SIIT): ::ffff:0:7f00:1 is 127.0.0.1 to a translator
    "64:ff9b::/96",  # NAT64: would reach IPv4 addresses through a translator
    "64:ff9b:1::/48",
    "100::/64",
    "2001::/23",  # IETF protocol assignments (Teredo, ORCHID...)
    "2001:db8::/32",
    "2002::/16",  # 6to4
    "fc00::/7",  # unique local
    "fe80::/10",  # link-local
    "fec0::/10",  # site-local (deprecated)
    "ff00::/8",  # multicast
)


def networks(names: Iterable[str] | None = None) -> list[Network]:
    return [ipaddress.ip_network(name) for name in (names or DEFAULT_BLOCKED_NETWORKS)]


def resolve_host(host: str, port: int) -> list[str]:
    """The IP addresses `host` resolves to (blocking)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def address_blocked(address: str, blocked: list[Network]) -> bool:
    """Whether `address` (an IP, IPv6 zone ignored) lies in a blocked network. An IPv6 address that carries an IPv4
    one (mapped, 6to4, Teredo) is checked as that IPv4 address too."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = [ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None]
        candidates += [candidate for candidate in embedded if candidate is not None]
    return any(
        candidate in network for candidate in candidates for network in blocked if candidate.version == network.version
    )


class UnresolvedHost(Exception):
    """A URL's host name does not resolve (or the URL has none)."""

    def __init__(self, host: str) -> None:
        super().__init__(f"{host or 'the URL'} does not resolve to an address")
        self.host = host


@dataclass(frozen=True)
class CheckedURL:
    """A URL's host, resolved once: its addresses, and whether any is blocked. A connection meant to be guarded goes
    to `address` (the one checked), not to whatever the name resolves to by the time it is made."""

    host: str
    port: int
    addresses: tuple[str, ...]
    private: bool

    @property
    def address(self) -> str:
        return self.addresses[0]


def check_url(url: str, blocked: list[Network] | None = None, resolver: Resolver | None = None) -> CheckedURL:
    """Resolve `url`'s host once (with `resolver`, default resolve_host) and check every address against `blocked`
    (default: every non-public range). A host that does not resolve raises UnresolvedHost."""
    parts = urlsplit(url)
    host = (parts.hostname or "").strip("[]").lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = (resolver or resolve_host)(host, port) if host else []
    except (OSError, UnicodeError, ValueError):
        addresses = []
    if not addresses:
        raise UnresolvedHost(host)
    blocked = blocked if blocked is not None else networks()
    private = any(address_blocked(address, blocked) for address in addresses)
    return CheckedURL(host=host, port=port, addresses=tuple(addresses), private=private)

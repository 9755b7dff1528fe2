"""Which network addresses the platform refuses to send requests to on a tenant's behalf: the http_request tool's
hosts and model providers' base URLs (server-side request forgery: a tenant must not reach the platform's own
network, its loopback or a cloud metadata service)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

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


def url_addresses(url: str) -> tuple[str, list[str]]:
    """The host of `url` and the addresses it resolves to (empty when it does not resolve)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").strip("[]").lower()
    if not host:
        return "", []
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return host, resolve_host(host, port)
    except (OSError, UnicodeError, ValueError):
        return host, []


def url_is_private(url: str, blocked: list[Network] | None = None) -> bool:
    """True when `url`'s host is, or resolves to, an address in a blocked network. A name that does not resolve
    here is not private (it cannot be reached either)."""
    _host, addresses = url_addresses(url)
    blocked = blocked if blocked is not None else networks()
    return any(address_blocked(address, blocked) for address in addresses)

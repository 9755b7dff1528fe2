"""Which network addresses the platform refuses to send requests to on a tenant's behalf: the http_request tool's
hosts, model providers' base URLs and the image URLs of /v1 content parts (server-side request forgery: a tenant must
not reach the platform's own network, its loopback or a cloud metadata service); and the one request loop that goes
only to checked addresses, redirects included (`pinned_response`)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

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


# --- a request that goes only where it was checked ---------------------------------------------------------------
#
# The http_request tool and the image-URL download share this loop: each hop's host is checked by the caller (its
# own rules and words), the request goes to the checked address with the name as Host header and TLS server name
# (DNS rebinding between the check and the connection cannot reach an internal host), and every redirect is checked
# again. No cookie survives a hop (a client's jar is keyed by the address connected to, not by the name).


@dataclass(frozen=True)
class Pinned:
    """A URL whose host the caller checked: the connection goes to `address`, named `host`."""

    url: httpx.URL
    host: str
    address: str


# Headers a redirect to another host keeps; any other (credentials under any name) was meant for the first host only.
CROSS_HOST_HEADERS = frozenset({"accept", "accept-language", "content-type", "user-agent"})


@asynccontextmanager
async def pinned_response(
    client: httpx.AsyncClient,
    method: str,
    url: httpx.URL,
    *,
    check: Callable[[httpx.URL], Awaitable[Pinned]],
    too_many_redirects: Callable[[], Exception],
    max_redirects: int,
    headers: dict[str, str] | None = None,
    json: Any = None,
) -> AsyncIterator[tuple[httpx.URL, httpx.Response]]:
    """The final (url, streamed response) of `method url`, each hop's host passed through `check` (which raises the
    caller's own refusal); redirects followed up to `max_redirects` (then `too_many_redirects()` is raised), a 301,
    302 or 303 turning the request into a body-less GET, and a hop to another host keeping only CROSS_HOST_HEADERS.
    The client must not follow redirects itself."""
    headers = dict(headers or {})
    for _hop in range(max_redirects + 1):
        target = await check(url)
        client.cookies.clear()
        request = client.build_request(
            method,
            url.copy_with(host=target.address),
            headers={**headers, "Host": url.netloc.decode("ascii")},
            json=json if json is not None and method != "GET" else None,
            extensions={"sni_hostname": target.host} if url.scheme == "https" else {},
        )
        response = await client.send(request, stream=True)
        try:
            if not (response.is_redirect and "location" in response.headers):
                yield url, response
                return
            following = url.join(response.headers["location"])
            if (following.scheme, following.netloc) != (url.scheme, url.netloc):
                headers = {key: value for key, value in headers.items() if key.lower() in CROSS_HOST_HEADERS}
            if response.status_code not in (307, 308):
                method, json = "GET", None
            url = following
        finally:
            await response.aclose()
    raise too_many_redirects()


async def bounded_body(response: httpx.Response, limit: int, too_large: Callable[[], Exception]) -> bytes:
    """The response's body, raising `too_large()` as soon as it passes `limit` bytes (never read whole first)."""
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise too_large()
        chunks.append(chunk)
    return b"".join(chunks)

"""Which address a request comes from. Daphne serves without `--proxy-headers`, so a request's REMOTE_ADDR is the
peer that connected; forwarded headers (X-Forwarded-For, -Proto, -Host...) are believed only when that peer is one
of the proxies listed in TRUSTED_PROXIES, and are removed from every other request, so that a client cannot choose
the address login throttling counts (django-axes reads REMOTE_ADDR) nor claim HTTPS (SECURE_PROXY_SSL_HEADER)."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from core.middleware import DualModeMiddleware

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Headers a proxy sets about the client; from anyone else they are dropped before any middleware reads them.
FORWARDED_META = (
    "HTTP_X_FORWARDED_FOR",
    "HTTP_X_FORWARDED_PROTO",
    "HTTP_X_FORWARDED_HOST",
    "HTTP_X_FORWARDED_PORT",
    "HTTP_X_REAL_IP",
    "HTTP_FORWARDED",
)


def proxy_networks(entries: Iterable[str]) -> list[Network]:
    """TRUSTED_PROXIES' entries (addresses or networks such as 10.0.0.0/8) as networks."""
    return list(_parsed(tuple(entries)))


@functools.lru_cache(maxsize=8)
def _parsed(entries: tuple[str, ...]) -> tuple[Network, ...]:
    try:
        return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry.strip())
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"TRUSTED_PROXIES: {exc}. List the addresses or networks of your proxies, comma-separated "
            "(e.g. 127.0.0.1,10.0.0.0/8). TRUSTED_PROXIES 中有无效的地址或网段。"
        ) from None


def _trusted(address: str, proxies: list[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return False
    return any(ip.version == network.version and ip in network for network in proxies)


def client_address(peer: str, forwarded_for: str, proxies: list[Network]) -> str:
    """The client's address: `peer` unless it is a trusted proxy; then X-Forwarded-For read from the right (each
    proxy appends the address it saw), skipping trusted proxies: the first other address is the client. The left
    of the header is whatever the client wrote, so it is never believed past an untrusted hop."""
    if not _trusted(peer, proxies):
        return peer
    address = peer
    for hop in reversed([hop.strip().strip("[]") for hop in forwarded_for.split(",")]):
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            break  # not an address ("unknown", garbage): keep the last hop that said something true
        address = hop
        if not _trusted(hop, proxies):
            break
    return address


class ForwardedHeadersMiddleware(DualModeMiddleware):
    """First in MIDDLEWARE: sets REMOTE_ADDR to the client's address and drops forwarded headers nobody trusted
    sent."""

    def apply(self, request: HttpRequest) -> None:
        meta = request.META
        peer = meta.get("REMOTE_ADDR", "")
        proxies = proxy_networks(getattr(settings, "TRUSTED_PROXIES", []))
        if proxies and _trusted(peer, proxies):
            meta["REMOTE_ADDR"] = client_address(peer, meta.get("HTTP_X_FORWARDED_FOR", ""), proxies)
            return
        for name in FORWARDED_META:
            meta.pop(name, None)

    def handle(self, request: HttpRequest) -> Any:
        self.apply(request)
        return self.get_response(request)

    async def ahandle(self, request: HttpRequest) -> Any:
        self.apply(request)
        return await self.get_response(request)

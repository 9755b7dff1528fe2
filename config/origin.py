"""Websocket origin check: a browser's socket is accepted only from the page's own origin (the Origin header names the
host and port the socket connects to), or from an origin listed in CSRF_TRUSTED_ORIGINS. Channels' own validator
matches host names only, so a page on another port of the same host could open sockets with the user's cookies."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


def _netloc(host: str, port: str | None, scheme: str) -> str:
    port = port or DEFAULT_PORTS.get(scheme, "")
    return f"{host.lower().strip('[]')}:{port}"


def origin_allowed(origin: str | None, host_header: str | None) -> bool:
    """Whether a socket whose handshake says `Origin: origin` and `Host: host_header` comes from an allowed page."""
    if not origin:
        return False
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    try:
        origin_netloc = _netloc(parts.hostname, str(parts.port) if parts.port else None, parts.scheme)
    except ValueError:
        return False
    trusted = {entry.rstrip("/").lower() for entry in getattr(settings, "CSRF_TRUSTED_ORIGINS", [])}
    if f"{parts.scheme}://{parts.netloc}".lower() in trusted:
        return True
    if not host_header or not validate_host(parts.hostname, settings.ALLOWED_HOSTS):
        return False
    host, port = split_domain_port(host_header)
    # The Host header's port is the one the browser connected to; without one, the default of the origin's scheme.
    return bool(host) and _netloc(host, port or None, parts.scheme) == origin_netloc


class SameOriginValidator:
    """ASGI middleware for websockets: deny the handshake unless origin_allowed()."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        headers = dict(scope.get("headers", []))
        origin = headers.get(b"origin", b"").decode("latin1") or None
        host = headers.get(b"host", b"").decode("latin1") or None
        if origin_allowed(origin, host):
            return await self.application(scope, receive, send)
        return await deny(receive, send)


async def deny(receive: Any, send: Any) -> None:
    """Refuse the handshake and end. Channels' WebsocketDenier is a consumer: it takes a channel on the channel
    layer and waits on Redis until the client goes away, for a socket it has already refused."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close"})

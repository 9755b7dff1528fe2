"""Websocket routes. Every route is served behind the origin check and AuthMiddlewareStack (asgi.py); a path no route
matches is refused like a socket from a foreign origin, instead of URLRouter's error (a 500 to the client)."""

from typing import Any

from django.urls import path, re_path

import chat.routing
import widget.routing
from config.consumers import PingConsumer
from config.origin import deny


async def unknown_path(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Close the handshake of a socket to a path no route serves."""
    await deny(receive, send)


websocket_urlpatterns = [
    path("ws/ping/", PingConsumer.as_asgi()),
    *chat.routing.websocket_urlpatterns,
    *widget.routing.websocket_urlpatterns,
    re_path(r"", unknown_path),  # last
]

"""Websocket routes. Every route is served behind AllowedHostsOriginValidator and AuthMiddlewareStack (asgi.py)."""

from django.urls import path

import chat.routing
from config.consumers import PingConsumer

websocket_urlpatterns = [
    path("ws/ping/", PingConsumer.as_asgi()),
    *chat.routing.websocket_urlpatterns,
]

"""Websocket route of the website widget (included in config/routing.py)."""

from django.urls import path

from widget.consumers import WidgetConsumer

websocket_urlpatterns = [
    path("ws/embed/<str:token>/", WidgetConsumer.as_asgi()),
]

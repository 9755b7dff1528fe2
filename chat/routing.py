"""Websocket routes of the chat surface (included in config/routing.py)."""

from django.urls import path

from chat.consumers import ConversationSocket

websocket_urlpatterns = [
    path("ws/chat/<int:conversation_id>/", ConversationSocket.as_asgi()),
]

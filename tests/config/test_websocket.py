"""Websockets: the real ASGI stack (origin check, session auth) round-trips through the Redis channel layer."""

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from config.asgi import application
from core.db import database_sync_to_async
from tests.websockets import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def _communicator(cookie: bytes | None, origin: bytes = b"http://testserver") -> WebsocketCommunicator:
    headers = [(b"origin", origin), (b"host", b"testserver")]
    if cookie:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, "/ws/ping/", headers=headers)


async def test_message_round_trips_through_the_redis_channel_layer(redis_url, member, tenant):
    assert type(get_channel_layer()).__name__ == "RedisChannelLayer"
    cookie = await database_sync_to_async(session_cookie)(member, tenant)
    communicator = _communicator(cookie)
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({"hello": "世界"})
    reply = await communicator.receive_json_from(timeout=5)
    assert reply == {"type": "pong", "tenant": tenant.slug, "echo": {"hello": "世界"}}
    await communicator.disconnect()


async def test_anonymous_socket_is_closed(db):
    communicator = _communicator(None)
    connected, code = await communicator.connect()
    assert not connected
    assert code == 4401


async def test_socket_from_a_foreign_origin_is_refused(member, tenant):
    cookie = await database_sync_to_async(session_cookie)(member, tenant)
    communicator = _communicator(cookie, origin=b"http://evil.example")
    connected, _ = await communicator.connect()
    assert not connected

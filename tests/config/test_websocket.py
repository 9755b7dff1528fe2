"""Websockets: the real ASGI stack (origin check, session auth) round-trips through the Redis channel layer."""

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from config.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def _session_cookie(user, tenant=None) -> bytes:
    client = Client()
    client.force_login(user)
    if tenant is not None:
        session = client.session
        session["active_tenant_id"] = tenant.pk
        session.save()
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()


def _communicator(cookie: bytes | None, origin: bytes = b"http://testserver") -> WebsocketCommunicator:
    headers = [(b"origin", origin), (b"host", b"testserver")]
    if cookie:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, "/ws/ping/", headers=headers)


async def test_message_round_trips_through_the_redis_channel_layer(redis_url, member, tenant):
    assert type(get_channel_layer()).__name__ == "RedisChannelLayer"
    cookie = await database_sync_to_async(_session_cookie)(member, tenant)
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
    cookie = await database_sync_to_async(_session_cookie)(member, tenant)
    communicator = _communicator(cookie, origin=b"http://evil.example")
    connected, _ = await communicator.connect()
    assert not connected

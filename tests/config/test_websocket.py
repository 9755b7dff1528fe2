"""Websockets: the real ASGI stack (origin check, session auth) round-trips through the Redis channel layer."""

import asyncio

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
    await communicator.disconnect()  # the consumer ends with the test, not when the test's event loop is torn down


async def test_socket_from_a_foreign_origin_is_refused(member, tenant):
    cookie = await database_sync_to_async(session_cookie)(member, tenant)
    communicator = _communicator(cookie, origin=b"http://evil.example")
    connected, _ = await communicator.connect()
    assert not connected
    # Refused and done: no consumer is left waiting on the channel layer for the client to go away.
    await asyncio.wait_for(asyncio.shield(communicator.future), timeout=1)


@pytest.mark.parametrize(
    ("origin", "host", "allowed"),
    [
        ("http://testserver", "testserver", True),
        ("http://testserver:8000", "testserver:8000", True),
        ("https://testserver", "testserver", True),
        ("http://testserver:9999", "testserver:8000", False),  # another port of the same host (the probe's finding)
        ("http://testserver:9999", "testserver", False),
        ("http://testserver", "testserver:8000", False),
        ("http://evil.example", "evil.example", False),  # not an allowed host
        ("null", "testserver", False),
        (None, "testserver", False),
        ("http://testserver", None, False),
    ],
)
def test_only_the_pages_own_origin_may_open_a_socket(origin, host, allowed, settings):
    from config.origin import origin_allowed

    settings.ALLOWED_HOSTS = ["testserver"]
    assert origin_allowed(origin, host) is allowed


def test_a_trusted_origin_may_open_a_socket(settings):
    from config.origin import origin_allowed

    settings.CSRF_TRUSTED_ORIGINS = ["https://agents.example.com"]
    assert origin_allowed("https://agents.example.com", "127.0.0.1:8000")
    assert not origin_allowed("https://agents.example.com:444", "127.0.0.1:8000")


async def test_a_socket_from_another_port_is_refused(member, tenant):
    cookie = await database_sync_to_async(session_cookie)(member, tenant)
    communicator = _communicator(cookie, origin=b"http://testserver:9999")
    connected, _ = await communicator.connect()
    assert not connected
    await asyncio.wait_for(asyncio.shield(communicator.future), timeout=1)


@pytest.mark.parametrize("path", ["/ws/nothing-here/", "/ws/chat/not-a-number/", "/elsewhere"])
async def test_l4_a_socket_to_an_unknown_path_is_refused_not_a_500(db, member, tenant, path):
    cookie = await database_sync_to_async(session_cookie)(member, tenant)
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver"), (b"cookie", cookie)]
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _code = await communicator.connect(timeout=5)  # an error in the application would raise here
    assert not connected
    await communicator.disconnect()

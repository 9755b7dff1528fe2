"""Redis restarted in the middle of a reply (a private redis-server of the test, the shared one is left alone): the
turn goes on and its reply is stored; a page that connects afterwards gets it from the database and the log."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
import uuid

import pytest

from core.db import database_sync_to_async
from memory.models import Message
from tenants.scope import tenant_scope
from tests.chat.test_consumer import _connect, _send
from tests.chat.test_consumer import conversation as conversation  # the fixture
from tests.turns import wait_turns

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivateRedis:
    def __init__(self) -> None:
        self.port = _free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def private_redis(settings):
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not installed")
    server = PrivateRedis()
    server.start()
    settings.REDIS_URL = server.url
    settings.CHAT_STREAM_PREFIX = f"test-restart-{uuid.uuid4().hex[:8]}"
    settings.REDIS_SOCKET_TIMEOUT = 2.0
    yield server
    server.stop()


async def test_a_reply_survives_a_redis_restart(private_redis, member, tenant, conversation, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 120, "delay": 0.02}})
    page = await _connect(member, tenant, conversation.pk)
    await page.send_json_to(_send("a long answer please"))
    for _ in range(5):
        await page.receive_json_from(timeout=5)
    await asyncio.to_thread(private_redis.stop)
    await asyncio.sleep(0.3)
    await asyncio.to_thread(private_redis.start)  # empty: frames and claims are gone
    await asyncio.wait_for(wait_turns(), timeout=30)

    def stored() -> list[tuple[str, str, int]]:
        with tenant_scope(tenant):
            rows = Message.objects.filter(conversation=conversation).order_by("id")
            return [(m.role, m.status, len(m.content)) for m in rows]

    rows = await database_sync_to_async(stored)()
    assert rows[0][0] == "user" and rows[-1][0] == "assistant" and rows[-1][1] == "complete" and rows[-1][2] > 0
    await page.disconnect()
    again = await _connect(member, tenant, conversation.pk)  # a fresh page after the restart connects and can write
    await again.send_json_to(_send("and now?"))
    frames = []
    while not frames or frames[-1]["type"] not in ("done", "error"):
        frames.append(await again.receive_json_from(timeout=10))
    assert frames[-1]["type"] == "done"
    await again.disconnect()

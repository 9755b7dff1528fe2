"""The chat as deployed: real Daphne processes on the test database and Redis, real websocket clients.

A turn runs in the process that received its message, and its frames, its Stop and a catch-up reach a page connected
to another process; an idle socket stays open past the channel layer's blocking-receive timeout; a storm of
connects all succeed."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import psycopg
import pytest
from websockets.asyncio.client import connect

from agents.services import agent_create, conversation_start
from config.serving import HANDSHAKE_SECONDS
from core.db import database_sync_to_async
from memory.models import Message
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, UserFactory
from tests.llm.factories import ModelProviderFactory
from tests.processes import daphne_servers, database_url, require_postgresql
from tests.websockets import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

IDLE_SECONDS = 60


@pytest.fixture
def prefix(settings):
    prefix = settings.CHAT_STREAM_PREFIX = f"test-procs-{uuid.uuid4().hex[:10]}"
    yield prefix
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client.scan_iter(f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def servers(request, redis_url, transactional_db, prefix, tmp_path):
    require_postgresql("Tests with Daphne processes")
    count = getattr(request, "param", 2)
    env = {"REDIS_URL": redis_url, "CHAT_STREAM_PREFIX": prefix, "LOG_LEVEL": "WARNING", "LLM_RETRY_BASE_DELAY": "0.01"}
    with daphne_servers(count, env=env, log_dir=tmp_path) as running:
        yield running


def _setup(tenant, base_url, users=1, conversations=1):
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=base_url, is_default=True)
        agent = agent_create(tenant=tenant, name="Advisor", system_prompt="You advise.", model="gpt-4")
        people = []
        for _ in range(users):
            user = UserFactory()
            MembershipFactory(user=user, tenant=tenant)
            people.append((user, session_cookie(user, tenant).decode()))
        chats = [conversation_start(agent=agent, user=people[n % users][0]) for n in range(conversations)]
        return people, chats


class Page:
    """A websocket client that does what the chat page does with frames."""

    def __init__(self, socket) -> None:
        self.socket = socket
        self.frames: list[dict] = []

    @classmethod
    async def open(cls, server, conversation_id: int, cookie: str, path: str = "ws/chat/{id}/") -> Page:
        socket = await connect(
            f"{server.ws}/{path.format(id=conversation_id)}",
            origin=f"http://127.0.0.1:{server.port}",
            additional_headers={"Cookie": cookie},
            open_timeout=20,
        )
        return cls(socket)

    async def send(self, frame: dict) -> None:
        await self.socket.send(json.dumps(frame))

    async def receive(self, timeout: float = 20) -> dict:
        frame = json.loads(await asyncio.wait_for(self.socket.recv(), timeout))
        if frame.get("seq") is not None:
            self.frames.append(frame)
        return frame

    async def until(self, *types: str, timeout: float = 30) -> dict:
        """Frames up to the first of `types` that belongs to the conversation (has a seq)."""
        while True:
            frame = await self.receive(timeout)
            if frame["type"] in types and frame.get("seq") is not None:
                return frame

    def seqs(self) -> list[int]:
        return [frame["seq"] for frame in self.frames]


def _consecutive(seqs: list[int]) -> bool:
    return seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def _messages(tenant, conversation):
    with tenant_scope(tenant):
        return list(Message.objects.filter(conversation=conversation).order_by("id"))


async def test_a_turn_in_one_process_streams_stops_and_catches_up_on_another(servers, tenant, scripted_llm):
    a, b = servers
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 400, "delay": 0.02}})
    [(_user, cookie)], [chat] = await database_sync_to_async(_setup)(tenant, scripted_llm.base_url)
    sender, watcher = await Page.open(a, chat.pk, cookie), await Page.open(b, chat.pk, cookie)
    for page in (sender, watcher):
        assert (await page.receive())["type"] == "hello"
        await page.send({"type": "catch_up", "after_seq": 0})

    await sender.send({"type": "user_message", "client_id": "c-1", "content": "talk a lot"})
    for _ in range(5):  # live frames of process A's turn, through the bus, on process B's socket
        await watcher.until("delta")
    await watcher.socket.close()  # the page on B drops; the turn goes on in A
    seen = watcher.seqs()
    await asyncio.sleep(0.5)

    watcher = await Page.open(b, chat.pk, cookie)
    hello = await watcher.receive()
    assert hello["type"] == "hello" and hello["running"] is True and hello["last_seq"] > seen[-1]
    await watcher.send({"type": "catch_up", "after_seq": seen[-1]})
    await watcher.until("delta")
    await watcher.send({"type": "stop"})  # from B, for the turn running in A
    end = await watcher.until("error")
    ended = await sender.until("error")

    assert end["code"] == ended["code"] == "cancelled"
    assert _consecutive(seen + watcher.seqs()), seen + watcher.seqs()
    assert watcher.frames[0]["seq"] == seen[-1] + 1
    assert sender.frames == [f for f in sender.frames if f["seq"] <= end["seq"]]
    assert [f["seq"] for f in sender.frames] == list(range(1, end["seq"] + 1))
    _user_message, reply = await database_sync_to_async(_messages)(tenant, chat)
    assert (reply.status, reply.error_code) == ("partial", "cancelled")
    text = "".join(f["content"] for f in sender.frames if f["type"] == "delta")
    assert text and reply.content == text
    assert len(await asyncio.to_thread(scripted_llm.requests)) == 1  # one turn, in one process
    await sender.socket.close()
    await watcher.socket.close()


@pytest.mark.parametrize("servers", [1], indirect=True)
async def test_an_idle_socket_survives_while_200_connects_arrive_at_once(servers, tenant, scripted_llm):
    """An idle chat page (and the channel layer's ping socket) stays open past 60 s, the blocking-receive timeout
    that used to close idle sockets with 1011; meanwhile 200 connects arriving at once are all accepted (on a loaded
    machine the later ones wait for the earlier: more than Daphne's command-line 5 s, within config.serving's)."""
    (server,) = servers
    people, chats = await database_sync_to_async(_setup)(tenant, scripted_llm.base_url, users=20, conversations=201)
    cookie = dict(people)[chats[0].user]
    started = time.monotonic()
    idle = await Page.open(server, chats[0].pk, cookie)
    assert (await idle.receive())["type"] == "hello"
    await idle.send({"type": "catch_up", "after_seq": 0})
    ping = await Page.open(server, 0, cookie, path="ws/ping/")

    async def connect_one(chat) -> float:
        begun = time.monotonic()
        page = await Page.open(server, chat.pk, dict(people)[chat.user])
        hello = await page.receive()
        assert hello["type"] == "hello" and hello["conversation_id"] == chat.pk
        await page.socket.close()
        return time.monotonic() - begun

    results = await asyncio.gather(*(connect_one(chat) for chat in chats[1:]), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, f"{len(failures)} of 200 connects failed: {failures[:3]!r}\n{server.output()}"
    slowest = max(results)
    assert slowest < HANDSHAKE_SECONDS, f"the slowest connect took {slowest:.1f} s (Daphne drops it after that)"

    await asyncio.sleep(max(0.0, IDLE_SECONDS + 2 - (time.monotonic() - started)))
    await ping.send({"hello": "still there"})
    assert json.loads(await asyncio.wait_for(ping.socket.recv(), 10))["echo"] == {"hello": "still there"}
    await idle.send({"type": "user_message", "client_id": "after-idle", "content": "hello"})
    done = await idle.until("done")
    assert done["status"] == "complete" and _consecutive(idle.seqs())
    assert idle.socket.close_code is None and ping.socket.close_code is None
    await idle.socket.close()
    await ping.socket.close()


@pytest.mark.parametrize("servers", [1], indirect=True)
async def test_a_connect_kept_waiting_past_daphnes_command_line_default_is_accepted(servers, tenant, scripted_llm):
    """A loaded machine answers a burst of connects late; the handshake waits (config.serving), it is not dropped.

    The session table is held locked for 7 s, so the connect's session read waits as it would behind a queue: with
    Daphne's command-line default (5 s) the socket got no HTTP answer."""
    (server,) = servers
    people, chats = await database_sync_to_async(_setup)(tenant, scripted_llm.base_url)
    cookie = dict(people)[chats[0].user]
    blocker = await psycopg.AsyncConnection.connect(database_url())
    try:
        await blocker.execute("LOCK TABLE django_session IN ACCESS EXCLUSIVE MODE")
        opening = asyncio.ensure_future(Page.open(server, chats[0].pk, cookie))
        await asyncio.sleep(7)
        assert not opening.done(), "the connect did not wait for the session"
        await blocker.rollback()
        page = await opening
    finally:
        await blocker.close()
    hello = await page.receive()
    assert hello["type"] == "hello" and hello["conversation_id"] == chats[0].pk
    await page.socket.close()

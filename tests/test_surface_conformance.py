"""Every way in starts turns through the engine's one admission (engine.admission), so every surface refuses the same
message the same way, in its own protocol, and stores nothing. A new surface joins by adding a driver to SURFACES.

Surfaces: the chat page's socket, the widget's socket, SSE (`/api/v1/conversations/{id}/messages/stream/`), REST
(`POST /api/v1/conversations/{id}/messages/`), `/v1/chat/completions` and `/mcp` (JSON-RPC `tools/call`), each driven
over the real ASGI stack (Daphne for HTTP, the project's ASGI application for sockets)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from agents.services import agent_create, agent_publish, conversation_start
from api.keys import key_create, key_revoke
from api.models import ApiKey, KeyScope
from config.asgi import application
from core.db import database_sync_to_async
from engine.places import stream_slot_take
from engine.streams import get_frame_log
from memory.models import Conversation, Message
from tenants.models import Role
from tenants.scope import all_tenants, tenant_scope
from tests.factories import MembershipFactory
from tests.llm.factories import ModelProviderFactory
from tests.turns import wait_turns
from tests.websockets import session_cookie
from tests.widget.helpers import HOST, ticket_for
from widget.models import EmbedToken

pytestmark = pytest.mark.django_db(transaction=True)

ALL_SCOPES = [KeyScope.READ, KeyScope.CHAT, KeyScope.MCP]


@dataclass
class World:
    base_url: str
    tenant: Any
    agent: Any
    member: Any  # the participant
    mine: Conversation  # the member's own conversation
    colleague_conversation: Conversation  # another member's
    foreign: Conversation  # another tenant's
    member_key: str
    admin_key: str
    admin: Any
    embed: EmbedToken
    visitor: str = ""
    visitor_conversation: Conversation | None = None


@dataclass
class Answer:
    """What a surface answered: the refusal's code (None: taken) and, for HTTP, the status."""

    code: str | int | None
    status: int | None = None
    # Which stored message it answered (a resent client_id is answered with the first one's).
    message: Any = None


@pytest.fixture
def world(asgi_live_server, tenant, other_tenant, member, scripted_llm, settings):
    settings.LLM_RETRY_BASE_DELAY = 0.01
    scripted_llm.set_rules({"when": {}, "reply": {"text": "ok"}})
    admin = MembershipFactory(tenant=tenant, role=Role.ADMIN).user
    colleague = MembershipFactory(tenant=tenant, role=Role.MEMBER).user
    foreign_user = MembershipFactory(tenant=other_tenant, role=Role.MEMBER).user
    made = {}
    for owner in (tenant, other_tenant):
        with tenant_scope(owner):
            ModelProviderFactory(tenant=owner, name="scripted", base_url=scripted_llm.base_url, is_default=True)
            agent = agent_create(tenant=owner, name="Helper", system_prompt="You help.", model="gpt-4")
            agent_publish(agent=agent, user=None)
            made[owner.pk] = agent
    agent = made[tenant.pk]
    with tenant_scope(tenant):
        mine = conversation_start(agent=agent, user=member)
        colleague_conversation = conversation_start(agent=agent, user=colleague)
        _key, member_key = key_create(tenant=tenant, user=member, name="member", scopes=ALL_SCOPES)
        _key, admin_key = key_create(tenant=tenant, user=admin, name="admin", scopes=ALL_SCOPES)
        embed = EmbedToken.objects.create(
            tenant=tenant, agent=agent, name="shop", allowed_origins=HOST, visitor_messages_per_hour=50
        )
    with tenant_scope(other_tenant):
        foreign = conversation_start(agent=made[other_tenant.pk], user=foreign_user)
    return World(
        base_url=asgi_live_server.url, tenant=tenant, agent=agent, member=member, mine=mine,
        colleague_conversation=colleague_conversation, foreign=foreign, member_key=member_key,
        admin_key=admin_key, admin=admin, embed=embed, visitor=uuid.uuid4().hex,
    )  # fmt: skip


def _snapshot() -> tuple[int, int]:
    with all_tenants(reason="test: the whole database's rows"):
        return Message.objects.count(), Conversation.objects.count()


# --- the drivers: one per surface ---------------------------------------------------------------------------------
#
# send(world, who, conversation, content, client_id) -> Answer. `who`: "member" (the participant), "admin" (may read
# every conversation of the tenant, may post into none but their own). `conversation`: None for the member's own.


async def _socket_answer(socket: WebsocketCommunicator, client_id: str) -> Answer:
    while True:
        frame = await socket.receive_json_from(timeout=10)
        if frame["type"] == "error" and frame.get("seq") is None:
            return Answer(frame["code"])
        if frame["type"] == "user_message" and frame.get("client_id") == client_id:
            return Answer(None, message=frame["message_id"])


async def chat_socket(
    world: World, who: str, conversation: Conversation | None, content: Any, client_id: str
) -> Answer:
    user = world.admin if who == "admin" else world.member
    conversation = conversation or world.mine
    cookie = await database_sync_to_async(session_cookie)(user, world.tenant)
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver"), (b"cookie", cookie)]
    socket = WebsocketCommunicator(application, f"/ws/chat/{conversation.pk}/", headers=headers)
    connected, code = await socket.connect()
    if not connected:  # the socket's way of saying "no such conversation": it never opens
        return Answer("conversation_not_found" if code == 4403 else f"close-{code}")
    try:
        assert (await socket.receive_json_from(timeout=5))["type"] == "hello"
        await socket.send_json_to({"type": "user_message", "client_id": client_id, "content": content})
        return await _socket_answer(socket, client_id)
    finally:
        await socket.disconnect()


async def widget_socket(
    world: World, who: str, conversation: Conversation | None, content: Any, client_id: str
) -> Answer:
    assert who == "member" and conversation is None  # a visitor names no conversation: the embed and their id do
    ticket = await database_sync_to_async(ticket_for)(Client(), world.embed)
    socket = WebsocketCommunicator(
        application,
        f"/ws/embed/{world.embed.token}/",
        headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")],
    )
    connected, code = await socket.connect()
    assert connected, code
    try:
        await socket.send_json_to({"type": "visitor", "ticket": ticket, "visitor": world.visitor})
        assert (await socket.receive_json_from(timeout=5))["type"] == "hello"
        await socket.send_json_to({"type": "user_message", "client_id": client_id, "content": content})
        return await _socket_answer(socket, client_id)
    finally:
        await socket.disconnect()


def _key(world: World, who: str) -> str:
    return world.admin_key if who == "admin" else world.member_key


async def _post(
    world: World, who: str, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=world.base_url, timeout=30) as http:
        return await http.post(
            path, content=json.dumps(body), headers={"Authorization": f"Bearer {_key(world, who)}",
                                                     "Content-Type": "application/json", **(headers or {})},
        )  # fmt: skip


def _http_answer(response: httpx.Response) -> Answer:
    if response.status_code >= 400:
        return Answer(response.json()["error"]["code"], response.status_code)
    return Answer(None, response.status_code)


def _sse_answer(response: httpx.Response) -> Answer:
    first = next(line for line in response.text.splitlines() if line.startswith("data: "))
    return Answer(None, response.status_code, message=json.loads(first[6:])["message_id"])


async def sse(world: World, who: str, conversation: Conversation | None, content: Any, client_id: str) -> Answer:
    conversation = conversation or world.mine
    path = f"/api/v1/conversations/{conversation.pk}/messages/stream/"
    response = await _post(world, who, path, {"content": content, "client_id": client_id})
    return _http_answer(response) if response.status_code >= 400 else _sse_answer(response)


async def rest(world: World, who: str, conversation: Conversation | None, content: Any, client_id: str) -> Answer:
    conversation = conversation or world.mine
    path = f"/api/v1/conversations/{conversation.pk}/messages/"
    response = await _post(world, who, path, {"content": content, "client_id": client_id})
    answer = _http_answer(response)
    if answer.code is None:
        answer.message = response.json()["message"]["id"]
    return answer


async def openai_v1(world: World, who: str, conversation: Conversation | None, content: Any, client_id: str) -> Answer:
    conversation = conversation or world.mine
    body = {"model": conversation.agent.slug, "messages": [{"role": "user", "content": content}],
            "metadata": {"conversation_id": str(conversation.pk)}}  # fmt: skip
    response = await _post(world, who, "/v1/chat/completions", body, {"Idempotency-Key": client_id})
    answer = _http_answer(response)
    if answer.code is None:
        answer.message = response.json()["id"]  # one completion id per stored user message
    return answer


async def mcp(world: World, who: str, conversation: Conversation | None, content: Any, client_id: str) -> Answer:
    conversation = conversation or world.mine
    arguments = {"message": content, "conversation_id": conversation.pk}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": conversation.agent.slug, "arguments": arguments}}  # fmt: skip
    response = await _post(world, who, "/mcp", call, {"Accept": "application/json, text/event-stream"})
    body = response.json()
    if "error" in body and "jsonrpc" in body:  # a JSON-RPC error: refused at the door (data.code), or by the protocol
        data = body["error"].get("data")
        refusal = data.get("code") if isinstance(data, dict) else None
        return Answer(refusal or body["error"]["code"], response.status_code)
    if response.status_code >= 400:
        return _http_answer(response)
    result = body["result"]
    if result.get("isError"):
        return Answer((result.get("structuredContent") or {}).get("error", {}).get("code") or "tool_error")
    return Answer(None)


SURFACES: dict[str, Callable[..., Awaitable[Answer]]] = {
    "chat_socket": chat_socket,
    "widget_socket": widget_socket,
    "sse": sse,
    "rest": rest,
    "openai_v1": openai_v1,
    "mcp": mcp,
}
HTTP_KEY_SURFACES = ("sse", "rest", "openai_v1", "mcp")


# --- the cases ----------------------------------------------------------------------------------------------------


async def _refused_and_nothing_stored(surface: str, world: World, code: str, **send: Any) -> None:
    before = await database_sync_to_async(_snapshot)()
    answer = await SURFACES[surface](world, send.pop("who", "member"), send.pop("conversation", None),
                                     send.pop("content", "hello"), send.pop("client_id", uuid.uuid4().hex))  # fmt: skip
    await wait_turns()
    assert answer.code == code, (surface, answer)
    assert await database_sync_to_async(_snapshot)() == before, f"{surface} stored something it refused"


MESSAGE_CASES = {
    "too_long": ("x" * 20_001, "message_too_long"),
    "nul": ("hello\x00world", "invalid_characters"),
    "lone_surrogate": ("hello\ud800world", "invalid_characters"),
    "empty": ("   ", "empty_message"),
}
# Where a surface's protocol refuses the request before any turn is asked for: the `mcp` package's JSON-RPC layer
# cannot decode a lone surrogate, and answers JSON-RPC's parse error (-32700) itself; nothing reaches the engine.
PROTOCOL_REFUSALS = {("mcp", "lone_surrogate"): -32700}


@pytest.mark.parametrize("surface", list(SURFACES))
@pytest.mark.parametrize("case", list(MESSAGE_CASES))
async def test_every_surface_refuses_a_bad_message_the_same_way(surface, case, world):
    content, code = MESSAGE_CASES[case]
    await _refused_and_nothing_stored(surface, world, PROTOCOL_REFUSALS.get((surface, case), code), content=content)


# The widget's visitor cannot name a conversation (the embed token and their id choose it), so it has no such case.
NAMING_SURFACES = [name for name in SURFACES if name != "widget_socket"]


@pytest.mark.parametrize("surface", NAMING_SURFACES)
async def test_every_surface_refuses_another_tenants_conversation(surface, world):
    await _refused_and_nothing_stored(surface, world, "conversation_not_found", conversation=world.foreign)


@pytest.mark.parametrize("surface", NAMING_SURFACES)
async def test_every_surface_refuses_a_post_into_another_members_conversation_even_for_an_admin(surface, world):
    """The finding: an owner's or admin's key wrote into a member's private conversation on /mcp, REST and /v1."""
    await _refused_and_nothing_stored(
        surface, world, "conversation_not_found", who="admin", conversation=world.colleague_conversation
    )


async def test_an_admin_still_reads_another_members_conversation(world):
    async with httpx.AsyncClient(base_url=world.base_url, timeout=30) as http:
        path = f"/api/v1/conversations/{world.colleague_conversation.pk}/messages/"
        response = await http.get(path, headers={"Authorization": f"Bearer {world.admin_key}"})
    assert response.status_code == 200


@pytest.mark.parametrize("surface", list(SURFACES))
async def test_every_surface_refuses_when_the_tenants_budget_is_spent(surface, world):
    world.tenant.monthly_token_budget = 0
    await database_sync_to_async(world.tenant.save)(update_fields=["monthly_token_budget"])
    await _refused_and_nothing_stored(surface, world, "quota_exceeded")


@pytest.mark.parametrize("surface", NAMING_SURFACES)
async def test_every_surface_refuses_while_another_turn_of_the_conversation_runs(surface, world):
    log = get_frame_log()
    assert await log.claim_turn(world.mine.pk, 10**9) is None  # a turn of this conversation runs elsewhere
    try:
        await _refused_and_nothing_stored(surface, world, "conversation_busy")
    finally:
        await log.release_turn(world.mine.pk, 10**9)


@pytest.mark.parametrize("surface", HTTP_KEY_SURFACES)
async def test_every_key_surface_refuses_a_revoked_key(surface, world):
    def revoke() -> None:
        with tenant_scope(world.tenant):
            key_revoke(key=ApiKey.objects.get(prefix=world.member_key.partition(".")[0]))

    await database_sync_to_async(revoke)()
    await _refused_and_nothing_stored(surface, world, "revoked_api_key")


@pytest.mark.parametrize("surface", ["sse", "openai_v1"])
async def test_every_streaming_key_surface_refuses_over_the_tenants_stream_limit(surface, world, settings):
    settings.API_TENANT_MAX_STREAMS = 1
    held = await database_sync_to_async(stream_slot_take)(world.tenant.pk, 1)
    assert held is not None
    try:
        if surface == "openai_v1":  # a streamed completion, as a client asks for one
            body = {"model": world.agent.slug, "messages": [{"role": "user", "content": "hi"}], "stream": True}
            before = await database_sync_to_async(_snapshot)()
            answer = _http_answer(await _post(world, "member", "/v1/chat/completions", body))
            assert (answer.code, answer.status) == ("too_many_streams", 429)
            assert await database_sync_to_async(_snapshot)() == before
        else:
            await _refused_and_nothing_stored(surface, world, "too_many_streams")
    finally:
        await held.arelease()


@pytest.mark.parametrize("surface", ["chat_socket", "widget_socket", "sse", "rest", "openai_v1"])
async def test_every_surface_answers_a_resent_client_id_once(surface, world):
    client_id = "dup"
    first = await SURFACES[surface](world, "member", None, "hello", client_id)
    await wait_turns()
    assert first.code is None and first.message is not None, first
    before = await database_sync_to_async(_snapshot)()
    again = await SURFACES[surface](world, "member", None, "hello", client_id)
    await wait_turns()
    assert again.code is None and again.message == first.message, (surface, first, again)
    assert await database_sync_to_async(_snapshot)() == before


# The pages' own rate: a member's messages per minute on the chat socket. Keys have API_KEY_RATE per request
# (tests/api), visitors their embed's hourly rate (tests/widget/test_socket.py): a key is not held to the pages' rate.
async def test_the_chat_page_refuses_a_member_over_their_message_rate_and_a_key_is_not_held_to_it(world, settings):
    settings.CHAT_USER_MESSAGES_PER_MINUTE = 1
    first = await chat_socket(world, "member", None, "one", uuid.uuid4().hex)
    await wait_turns()
    assert first.code is None
    await _refused_and_nothing_stored("chat_socket", world, "user_rate_limited", content="two")
    by_key = await rest(world, "member", None, "three", uuid.uuid4().hex)
    assert by_key.code is None, by_key

"""The widget's socket end to end (real ASGI stack, scripted model server): a reply streams as on the chat page,
catch-up after a drop, the visitor's rate and the embed's budget refused in words, visitors kept apart."""

from __future__ import annotations

import uuid

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from config.asgi import application
from core.db import database_sync_to_async
from memory.models import Conversation, Message, Visitor
from tenants.scope import tenant_scope
from tests.turns import wait_turns
from tests.websockets import session_cookie
from tests.widget.helpers import ChatPage, communicator, make_embed, new_visitor, open_chat

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _isolated_streams(settings):
    settings.LLM_RETRY_BASE_DELAY = 0.01
    settings.CHAT_STREAM_PREFIX = f"test-widget-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def embed(tenant, scripted_llm):
    return make_embed(tenant, scripted_llm.base_url, visitor_messages_per_hour=2)


async def _open(page: ChatPage):
    """The widget's socket as chat.js opens it: no credential in the URL; the ticket and visitor id in its first
    frame."""
    socket = communicator(page.ws_path)
    connected, code = await socket.connect()
    assert connected, code
    await socket.send_json_to(page.socket_auth)
    hello = await socket.receive_json_from(timeout=5)
    assert hello["type"] == "hello"
    return socket, hello


async def _refused(path: str, auth: dict) -> int:
    """The close code of a socket whose first frame's credentials are refused."""
    socket = communicator(path)
    connected, code = await socket.connect()
    assert connected, code
    await socket.send_json_to(auth)
    closed = await socket.receive_output(timeout=5)
    assert closed["type"] == "websocket.close", closed
    return closed["code"]


async def _until_done(socket, timeout=10):
    frames = []
    while True:
        frame = await socket.receive_json_from(timeout=timeout)
        frames.append(frame)
        if frame["type"] == "error" or (frame["type"] == "done" and frame.get("seq") is not None):
            return frames


def _send(text):
    return {"type": "user_message", "client_id": uuid.uuid4().hex, "content": text}


async def test_a_reply_streams_and_a_dropped_socket_catches_up(embed, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Free shipping over 50.", "chunk_size": 4}})
    path = await database_sync_to_async(open_chat)(Client(), embed, new_visitor())
    socket, _hello = await _open(path)
    await socket.send_json_to(_send("Shipping?"))
    frames = await _until_done(socket)
    await wait_turns()
    assert frames[0]["type"] == "user_message"
    assert "".join(f["content"] for f in frames if f["type"] == "delta") == "Free shipping over 50."
    assert frames[-1]["html"] == "<p>Free shipping over 50.</p>"
    await socket.disconnect()

    again, _hello = await _open(path)  # the page reconnects and asks for what it missed
    await again.send_json_to({"type": "catch_up", "after_seq": frames[0]["seq"]})
    replayed = await _until_done(again)
    assert replayed[-1]["type"] == "done" and replayed[-1]["message_id"] == frames[-1]["message_id"]
    await again.disconnect()


async def test_the_visitor_rate_is_refused_in_words(embed, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "ok"}})
    path = await database_sync_to_async(open_chat)(Client(), embed, new_visitor())
    socket, _hello = await _open(path)
    for text in ("one", "two"):
        await socket.send_json_to(_send(text))
        assert (await _until_done(socket))[-1]["type"] == "done"
        await wait_turns()
    await socket.send_json_to(_send("three"))
    refused = await _until_done(socket)
    assert refused[-1]["type"] == "error" and refused[-1]["code"] == "rate_limited"
    assert "Message limit reached (2 per hour)" in refused[-1]["message"]
    await socket.disconnect()
    # Another visitor of the same embed still may.
    other = await database_sync_to_async(open_chat)(Client(), embed, new_visitor())
    socket, _hello = await _open(other)
    await socket.send_json_to(_send("hello"))
    assert (await _until_done(socket))[-1]["type"] == "done"
    await wait_turns()
    await socket.disconnect()


async def test_finding_a_rotated_visitor_id_is_a_new_visitor_and_new_visitors_are_limited(
    embed, scripted_llm, settings
):
    """The probe escaped the per-visitor rate by rotating the id; each new id was also an account and a
    conversation. Now a new id is a new visitor, made with its first message, and new visitors are limited per address
    (and per token)."""
    settings.WIDGET_NEW_VISITORS_PER_ADDRESS = 2
    scripted_llm.set_rules({"when": {}, "reply": {"text": "ok"}})
    for _ in range(2):
        socket, _hello = await _open(await database_sync_to_async(open_chat)(Client(), embed, new_visitor()))
        await socket.send_json_to(_send("hi"))
        assert (await _until_done(socket))[-1]["type"] == "done"
        await wait_turns()
        await socket.disconnect()
    before = await database_sync_to_async(_widget_rows)(embed)
    socket, _hello = await _open(await database_sync_to_async(open_chat)(Client(), embed, new_visitor()))
    await socket.send_json_to(_send("hi"))
    refused = (await _until_done(socket))[-1]
    assert refused["code"] == "new_visitors_limited" and refused["retry_after"] > 0
    assert await database_sync_to_async(_widget_rows)(embed) == before == (2, 2, 4)
    await socket.disconnect()


def _widget_rows(embed) -> tuple[int, int, int]:
    """Visitors, their conversations and messages of this embed."""
    with tenant_scope(embed.tenant):
        conversations = Conversation.objects.filter(visitor__embed_id=embed.pk)
        return (
            Visitor.objects.filter(embed_id=embed.pk).count(),
            conversations.count(),
            Message.objects.filter(conversation__in=conversations).count(),
        )


def _spend(embed, tokens):
    embed.daily_token_budget = tokens
    with tenant_scope(embed.tenant):
        embed.save()


async def test_the_daily_budget_is_counted_from_replies_and_refused_in_chinese(embed, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "ok"}})
    client = Client()
    path = await database_sync_to_async(open_chat)(client, embed, new_visitor())
    socket, _hello = await _open(path)
    await socket.send_json_to(_send("one"))
    done = (await _until_done(socket))[-1]
    await wait_turns()
    used = done["usage"]["prompt_tokens"] + done["usage"]["completion_tokens"]
    assert used > 0
    await socket.disconnect()
    await database_sync_to_async(_spend)(embed, used)  # today's replies used all of it
    zh_page = await database_sync_to_async(open_chat)(Client(), embed, new_visitor(), lang="zh")
    socket, _hello = await _open(zh_page)
    await socket.send_json_to(_send("two"))
    refused = (await _until_done(socket))[-1]
    assert refused["code"] == "daily_budget_exceeded" and "明天" in refused["message"]  # "come back tomorrow"
    await socket.disconnect()


async def test_sockets_with_a_bad_ticket_or_on_the_chat_route_are_refused(embed, tenant, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "ok"}})
    page = await database_sync_to_async(open_chat)(Client(), embed, new_visitor())
    forged = {**page.socket_auth, "ticket": "x" + page.socket_auth["ticket"]}
    assert await _refused(page.ws_path, forged) == 4403
    assert await _refused(page.ws_path, {**page.socket_auth, "visitor": "not-a-visitor-id"}) == 4403
    assert await _refused(page.ws_path, {"type": "catch_up", "after_seq": 0}) == 4401  # no credentials first
    socket, _hello = await _open(page)
    await socket.send_json_to(_send("hi"))
    await _until_done(socket)
    await wait_turns()
    await socket.disconnect()
    conversation_id = await database_sync_to_async(_widget_conversation_id)(tenant)
    # The visitor's conversation on the chat socket: no session, refused.
    chat = communicator(f"/ws/chat/{conversation_id}/")
    connected, _code = await chat.connect()
    assert not connected


def _widget_conversation_id(tenant) -> int:
    with tenant_scope(tenant):
        return Conversation.objects.filter(source="widget").order_by("-id").values_list("pk", flat=True).first()


async def test_a_second_visitor_cannot_read_the_first_visitors_conversation(embed, tenant, member, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Your order 1234 ships today."}})
    first = await database_sync_to_async(open_chat)(Client(), embed, new_visitor())
    socket, hello = await _open(first)
    assert hello["conversation_id"] is None  # nothing is made before the visitor's first message
    await socket.send_json_to(_send("Where is my order?"))
    await _until_done(socket)
    await wait_turns()
    await socket.disconnect()
    hello = {"conversation_id": await database_sync_to_async(_widget_conversation_id)(tenant)}
    second = await database_sync_to_async(open_chat)(Client(), embed, new_visitor())
    socket, other_hello = await _open(second)
    assert other_hello["conversation_id"] is None
    await socket.send_json_to({"type": "catch_up", "after_seq": 0})
    assert await socket.receive_nothing(timeout=0.5)  # nothing of the first visitor's conversation
    await socket.disconnect()
    # A member of the tenant does not open a visitor's conversation on the chat socket either.
    cookie = await database_sync_to_async(session_cookie)(member, tenant)
    chat = WebsocketCommunicator(
        application, f"/ws/chat/{hello['conversation_id']}/",
        headers=[(b"origin", b"http://testserver"), (b"host", b"testserver"), (b"cookie", cookie)],
    )  # fmt: skip
    connected, code = await chat.connect()
    assert not connected and code == 4403
    assert await database_sync_to_async(_widget_messages)(tenant) == 2  # the first visitor's question and reply


def _widget_messages(tenant):
    with tenant_scope(tenant):
        return Message.objects.filter(conversation__source="widget").count()


async def test_a_socket_from_the_host_page_or_with_another_embeds_ticket_is_refused(embed, other_tenant, scripted_llm):
    page = await database_sync_to_async(open_chat)(Client(), embed, new_visitor())
    # Opened by the host page itself (its origin), not by the platform's frame: refused by the origin check.
    foreign = WebsocketCommunicator(application, page.ws_path, headers=[(b"origin", b"http://shop.example"),
                                                                        (b"host", b"testserver")])  # fmt: skip
    connected, _code = await foreign.connect()
    assert not connected
    # This embed's ticket on another tenant's embed socket.
    other = await database_sync_to_async(make_embed)(other_tenant, scripted_llm.base_url)
    assert await _refused(f"/ws/embed/{other.token}/", page.socket_auth) == 4403

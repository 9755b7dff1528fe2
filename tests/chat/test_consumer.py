"""The chat websocket end to end: the real ASGI stack (session cookie, origin check), the scripted model server,
the channel layer and frame log of the run (Redis and PostgreSQL in CI, in-memory and SQLite otherwise)."""

import asyncio
import uuid

import pytest
from channels.testing import WebsocketCommunicator

from agents.services import agent_create, conversation_start
from config.asgi import application
from core.db import database_sync_to_async
from engine import streams, turns
from llm.errors import message_for
from memory.models import Message
from tenants.models import Role
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, UserFactory
from tests.llm.factories import ModelProviderFactory
from tests.turns import wait_turns
from tests.websockets import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _isolated_streams(settings):
    settings.LLM_RETRY_BASE_DELAY = 0.01
    settings.LLM_RETRY_MAX_DELAY = 0.02
    # Conversation ids repeat across test databases: each test its own keys in Redis, or its own in-process log.
    prefix = settings.CHAT_STREAM_PREFIX = f"test-chat-{uuid.uuid4().hex[:12]}"
    yield
    if settings.REDIS_URL:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL)
        keys = list(client.scan_iter(f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()


@pytest.fixture
def conversation(tenant, member, scripted_llm):
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True)
        agent = agent_create(tenant=tenant, name="Solar advisor", system_prompt="You advise.", model="gpt-4")
        return conversation_start(agent=agent, user=member)


async def _socket(user, tenant, conversation_id, language="en") -> WebsocketCommunicator:
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver"), (b"accept-language", language.encode())]
    if user is not None:
        headers.append((b"cookie", await database_sync_to_async(session_cookie)(user, tenant)))
    return WebsocketCommunicator(application, f"/ws/chat/{conversation_id}/", headers=headers)


async def _connect(user, tenant, conversation_id, language="en") -> WebsocketCommunicator:
    communicator = await _socket(user, tenant, conversation_id, language)
    connected, code = await communicator.connect()
    assert connected, code
    hello = await communicator.receive_json_from(timeout=5)
    assert hello["type"] == "hello" and hello["conversation_id"] == conversation_id
    return communicator


async def _frames_until(communicator, last_type=("done", "error"), timeout=10) -> list[dict]:
    frames = []
    while True:
        frame = await communicator.receive_json_from(timeout=timeout)
        frames.append(frame)
        final = frame["type"] in last_type and frame.get("seq") is not None
        if final and (frame["type"] != "done" or frame["status"] == "complete"):
            return frames


def _send(text, client_id=None):
    return {"type": "user_message", "client_id": client_id or str(uuid.uuid4()), "content": text}


def _messages(tenant, conversation):
    with tenant_scope(tenant):
        return list(Message.objects.filter(conversation=conversation).order_by("id"))


def _assert_consecutive(frames):
    seqs = [frame["seq"] for frame in frames]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


async def test_deltas_stream_in_order_and_the_reply_is_stored_with_usage(member, tenant, conversation, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Panels face **south**.", "chunk_size": 3}})
    socket = await _connect(member, tenant, conversation.pk)
    await socket.send_json_to(_send("Which way?", "c-1"))
    frames = await _frames_until(socket)
    await wait_turns()

    _assert_consecutive(frames)
    echo = frames[0]
    assert echo["type"] == "user_message" and echo["client_id"] == "c-1" and echo["content"] == "Which way?"
    assert [f["type"] for f in frames[-2:]] == ["step", "done"]
    assert "".join(f["content"] for f in frames if f["type"] == "delta") == "Panels face **south**."
    done = frames[-1]
    assert done["html"] == "<p>Panels face <strong>south</strong>.</p>" and "content" not in done
    assert done["usage"]["completion_tokens"] > 0 and done["strategy"]["name"] == "none"

    user, reply = await database_sync_to_async(_messages)(tenant, conversation)
    assert (user.pk, user.client_id) == (echo["message_id"], "c-1")
    assert (reply.pk, reply.status, reply.content) == (done["message_id"], "complete", "Panels face **south**.")
    assert reply.usage["prompt_tokens"] == done["usage"]["prompt_tokens"] > 0
    await socket.disconnect()


async def test_a_resent_client_id_runs_once(member, tenant, conversation, scripted_llm):
    socket = await _connect(member, tenant, conversation.pk)
    await socket.send_json_to(_send("hello", "same-id"))
    await socket.send_json_to(_send("hello", "same-id"))  # while the first is running
    await wait_turns()
    await socket.send_json_to(_send("hello", "same-id"))  # after the reply is stored
    frames = []
    while not await socket.receive_nothing(timeout=0.3):
        frames.append(await socket.receive_json_from())
    await socket.disconnect()

    assert len(await asyncio.to_thread(scripted_llm.requests)) == 1
    messages = await database_sync_to_async(_messages)(tenant, conversation)
    assert [m.role for m in messages] == ["user", "assistant"]
    # Every frame carries the one turn's seqs: the resends replayed it, they did not start another.
    assert {f["seq"] for f in frames} == set(range(1, max(f["seq"] for f in frames) + 1))
    assert [f["type"] for f in frames].count("user_message") >= 2
    assert all(f["message_id"] == messages[0].pk for f in frames if f["type"] == "user_message")


async def test_catch_up_after_a_disconnect_returns_exactly_the_missing_frames(
    member, tenant, conversation, scripted_llm
):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 60, "delay": 0.02}})
    first = await _connect(member, tenant, conversation.pk)
    await first.send_json_to(_send("tell me a long story"))
    seen = [await first.receive_json_from(timeout=5) for _ in range(6)]
    await first.disconnect()  # mid-reply: the turn goes on without any socket
    await asyncio.sleep(0.2)

    second = await _connect(member, tenant, conversation.pk)
    await second.send_json_to({"type": "catch_up", "after_seq": seen[-1]["seq"]})
    rest = await _frames_until(second)
    await wait_turns()
    await second.disconnect()

    _assert_consecutive(seen + rest)
    assert rest[0]["seq"] == seen[-1]["seq"] + 1
    text = "".join(f["content"] for f in seen + rest if f["type"] == "delta")
    (_user, reply) = await database_sync_to_async(_messages)(tenant, conversation)
    assert reply.status == "complete" and reply.content == text and rest[-1]["message_id"] == reply.pk


async def test_a_model_error_gives_an_error_frame_in_the_connection_language(
    member, tenant, conversation, scripted_llm
):
    scripted_llm.set_rules({"when": {}, "reply": {"error": {"status": 500}}})
    socket = await _connect(member, tenant, conversation.pk, language="zh-CN,zh;q=0.9")
    await socket.send_json_to(_send("hello"))
    frames = await _frames_until(socket)
    await wait_turns()
    await socket.disconnect()

    assert len(await asyncio.to_thread(scripted_llm.requests)) == 3  # the factory's provider retries twice
    assert [f["type"] for f in frames] == ["user_message", "error"]
    error = frames[-1]
    assert error["code"] == "provider_error"
    assert error["message"] == message_for("provider_error", "zh-hans") != message_for("provider_error", "en")
    assert error["message_id"] is None and error["user_message_id"] == frames[0]["message_id"]
    user, failed = await database_sync_to_async(_messages)(tenant, conversation)
    assert (user.role, user.content) == ("user", "hello")
    assert (failed.status, failed.error_code) == ("error", "provider_error")


async def test_a_dropped_stream_keeps_the_partial_reply(member, tenant, conversation, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "one two three four five six", "drop_after": 3}})
    socket = await _connect(member, tenant, conversation.pk)
    await socket.send_json_to(_send("count"))
    frames = await _frames_until(socket)
    await wait_turns()
    await socket.disconnect()

    done, error = frames[-2:]
    assert (done["type"], done["status"]) == ("done", "partial")
    assert (error["type"], error["code"]) == ("error", "stream_dropped")
    assert error["message"].startswith("The model's reply was cut off")
    _user, partial = await database_sync_to_async(_messages)(tenant, conversation)
    assert (partial.pk, partial.status, partial.error_code) == (error["message_id"], "partial", "stream_dropped")
    assert partial.content == "".join(f["content"] for f in frames if f["type"] == "delta")


async def test_stop_from_another_socket_stores_a_partial_reply(member, tenant, conversation, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 400, "delay": 0.01}})
    sender = await _connect(member, tenant, conversation.pk)
    other_tab = await _connect(member, tenant, conversation.pk)
    await other_tab.send_json_to({"type": "catch_up", "after_seq": 0})
    await sender.send_json_to(_send("talk a lot"))
    for _ in range(4):
        await other_tab.receive_json_from(timeout=5)
    await other_tab.send_json_to({"type": "stop"})
    frames = await _frames_until(sender)
    await wait_turns()
    await sender.disconnect()
    await other_tab.disconnect()

    assert frames[-1]["type"] == "error" and frames[-1]["code"] == "cancelled"
    _user, partial = await database_sync_to_async(_messages)(tenant, conversation)
    assert (partial.status, partial.error_code) == ("partial", "cancelled")
    assert partial.content
    assert partial.content == "".join(f["content"] for f in frames if f["type"] == "delta")


async def test_a_second_message_while_a_turn_runs_is_refused_as_busy(member, tenant, conversation, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 200, "delay": 0.01}})  # longer than the grace
    socket = await _connect(member, tenant, conversation.pk)
    await socket.send_json_to(_send("first"))
    await socket.send_json_to(_send("second", "c-second"))
    frames = await _frames_until(socket)
    await wait_turns()
    await socket.disconnect()

    busy = [f for f in frames if f["type"] == "error" and f["seq"] is None]
    assert [(f["code"], f["client_id"]) for f in busy] == [("conversation_busy", "c-second")]
    messages = await database_sync_to_async(_messages)(tenant, conversation)
    assert [m.content for m in messages if m.role == "user"] == ["first"]


@pytest.mark.parametrize(
    "late, sent", [(0.2, 5), (turns.CLAIM_GRACE_SECONDS * 3, 2)], ids=["within the grace", "past the grace"]
)
async def test_a_message_sent_as_the_reply_ends_is_not_refused(
    late, sent, member, tenant, conversation, scripted_llm, monkeypatch
):
    """`done` reaches the page just before the turn releases its claim (later still on a loaded process, as here,
    even past the grace a running turn gets): the next message waits for the release instead of being refused as
    busy."""
    log = streams.get_frame_log()
    release = log.release_turn

    async def late_release(conversation_id, turn_id):
        await asyncio.sleep(late)
        await release(conversation_id, turn_id)

    monkeypatch.setattr(log, "release_turn", late_release)
    socket = await _connect(member, tenant, conversation.pk)
    for n in range(sent):
        await socket.send_json_to(_send(f"message {n}"))
        frames = await _frames_until(socket)
        assert not [f for f in frames if f["type"] == "error"], frames
    await wait_turns()
    await socket.disconnect()
    messages = await database_sync_to_async(_messages)(tenant, conversation)
    assert [m.role for m in messages] == ["user", "assistant"] * sent


async def test_frames_and_the_stop_flag_live_in_redis(redis_url, member, tenant, conversation, scripted_llm):
    assert isinstance(streams.get_frame_log(), streams.RedisFrameLog)
    socket = await _connect(member, tenant, conversation.pk)
    await socket.send_json_to(_send("hello"))
    frames = await _frames_until(socket)
    await wait_turns()
    await socket.disconnect()
    log = streams.get_frame_log()
    assert [logged.as_dict() for logged in await log.after(conversation.pk, 0)] == frames
    assert await log.last_seq(conversation.pk) == frames[-1]["seq"]
    assert await log.running_turn(conversation.pk) is None


async def test_a_tenant_admin_may_open_a_member_conversation(tenant_admin, tenant, conversation):
    socket = await _connect(tenant_admin, tenant, conversation.pk)
    await socket.disconnect()


@pytest.mark.parametrize("who", ["other tenant admin", "other member", "anonymous", "unknown conversation"])
async def test_others_cannot_connect(who, tenant, other_tenant, other_tenant_admin, conversation):
    expected = 4403
    user, active, conversation_id = None, tenant, conversation.pk
    if who == "other tenant admin":
        user, active = other_tenant_admin, other_tenant
    elif who == "other member":
        user = await database_sync_to_async(
            lambda: MembershipFactory(tenant=tenant, role=Role.MEMBER, user=UserFactory(username="colleague")).user
        )()
    elif who == "anonymous":
        expected = 4401
    else:
        user, conversation_id = conversation.user, conversation.pk + 1000
    communicator = await _socket(user, active, conversation_id)
    connected, code = await communicator.connect()
    assert (connected, code) == (False, expected)


async def test_turn_claims_are_exclusive_renewable_and_released_only_by_their_turn(db):
    log = streams.get_frame_log()
    assert await log.claim_turn(7, 70) is None
    assert await log.claim_turn(7, 71) == 70
    await log.renew_turn(7, 71)  # not its claim: no effect
    await log.release_turn(7, 71)
    assert await log.running_turn(7) == 70
    await log.request_stop(7, 70)
    assert await log.stop_requested(7, 70) and not await log.stop_requested(7, 71)
    await log.renew_turn(7, 70)
    await log.release_turn(7, 70)
    assert await log.running_turn(7) is None and not await log.stop_requested(7, 70)
    assert await log.claim_turn(7, 71) is None


async def test_an_open_socket_closes_when_the_membership_ends(tenant, member, conversation):
    """The probe's finding: an open socket kept working after the user was removed from the tenant."""
    from tenants.models import Membership

    communicator = await _connect(member, tenant, conversation.pk)
    await database_sync_to_async(Membership.objects.filter(user=member, tenant=tenant).delete)()
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4012}  # the page reconnects at once...
    refused = await _socket(member, tenant, conversation.pk)
    connected, code = await refused.connect()
    assert not connected and code == 4403  # ...and is refused for good
    await refused.disconnect()
    await communicator.disconnect()


async def test_a_role_change_closes_the_socket_and_a_reconnect_checks_again(tenant, member, conversation):
    from tenants.models import Membership, Role

    communicator = await _connect(member, tenant, conversation.pk)
    other = await _connect(member, tenant, conversation.pk)

    def promote() -> None:
        membership = Membership.objects.get(user=member, tenant=tenant)
        membership.role = Role.ADMIN
        membership.save()

    await database_sync_to_async(promote)()
    for socket in (communicator, other):
        assert (await socket.receive_output(timeout=5))["type"] == "websocket.close"
    again = await _connect(member, tenant, conversation.pk)  # still allowed: the page reconnects
    await again.disconnect()


@pytest.mark.parametrize(
    ("content", "code", "language", "words"),
    [
        ("   \n ", "empty_message", "en", "The message is empty."),
        ("   \n ", "empty_message", "zh-hans", "消息为空"),
        ("x" * 20_001, "message_too_long", "en", "longer than 20000 characters"),
    ],
)
async def test_an_empty_or_too_long_message_is_refused_with_a_reason(member, tenant, conversation, content, code,
                                                                     language, words):  # fmt: skip
    socket = await _connect(member, tenant, conversation.pk, language=language)
    await socket.send_json_to({"type": "user_message", "client_id": "c-1", "content": content})
    refusal = await socket.receive_json_from(timeout=5)
    assert refusal["type"] == "error" and refusal["code"] == code and words in refusal["message"]
    assert refusal["client_id"] == "c-1" and refusal.get("seq") is None
    assert await database_sync_to_async(_messages)(tenant, conversation) == []
    await socket.disconnect()


def _small_window_conversation(tenant, member, base_url):
    """A published agent on a model with a 600-token window, and a member's conversation with it."""
    from agents.services import agent_publish
    from chat.selectors import conversation_message_limit

    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="small", base_url=base_url, is_default=True,
                             chat_models=[{"name": "small-model", "context_window": 600}],
                             default_chat_model="small-model")  # fmt: skip
        agent = agent_create(tenant=tenant, name="Brief", system_prompt="Answer briefly.", model="small-model")
        agent_publish(agent=agent, user=None)
        conversation = conversation_start(agent=agent, user=member)
        return conversation, conversation_message_limit(conversation=conversation)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
async def test_a_message_over_the_agents_own_limit_is_refused_with_it(member, tenant, scripted_llm, language):
    """Issue 18: the limit follows the agent's model window (600 tokens here), not only the platform's 20,000."""
    conversation, limit = await database_sync_to_async(_small_window_conversation)(
        tenant, member, scripted_llm.base_url
    )
    assert 0 < limit.chars < 300
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Noted."}})
    socket = await _connect(member, tenant, conversation.pk, language=language)
    refusals = []
    for text in ("x" * (limit.chars + 1), "🦜" * limit.chars):  # too many characters; few enough, too many tokens
        await socket.send_json_to(_send(text, "c-long"))
        refusals.append(await socket.receive_json_from(timeout=5))
    assert all(r["type"] == "error" and r["code"] == "message_too_long" and r["seq"] is None for r in refusals)
    chars, tokens = refusals[0]["message"], refusals[1]["message"]
    assert str(limit.chars) in chars and "small-model" in chars and "600" in chars
    assert str(limit.tokens) in tokens and "small-model" in tokens
    if language == "en":
        assert f"longer than {limit.chars} characters, the most that small-model (a window of 600 tokens)" in chars
        assert f"more than the {limit.tokens} that small-model has room for" in tokens
    assert await database_sync_to_async(_messages)(tenant, conversation) == []
    await socket.send_json_to(_send("x" * limit.chars, "c-fits"))  # at the limit: sent and answered
    frames = await _frames_until(socket)
    await wait_turns()
    assert frames[0]["type"] == "user_message" and frames[-1]["type"] == "done"
    await socket.disconnect()

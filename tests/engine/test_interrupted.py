"""A turn whose process died is ended by the hub of a process whose page opens its conversation (engine.bus.Hub ->
engine.interrupted, an import the layers contract sees, no longer a slot engine.turns fills): the reply the frame log
kept is stored as partial with the code `interrupted`, and the page gets its `done` and `error` frames. Needs Redis
(the in-process log has no other process whose turns could die)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from agents import frames
from core.db import database_sync_to_async
from engine import streams
from engine.bus import hub_for
from engine.sinks import ChannelSink
from engine.turns import Outcome, submit_user_message
from llm import errors
from memory.models import Message, MessageStatus, Role
from memory.services import message_add
from tenants.scope import tenant_scope
from tests.chat.test_consumer import conversation  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def redis_log(redis_url, settings):
    prefix = settings.CHAT_STREAM_PREFIX = f"test-interrupted-{uuid.uuid4().hex[:12]}"
    settings.CHAT_TURN_LEASE_SECONDS = 1
    yield streams.get_frame_log()
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


class Page:
    """A socket of the conversation, as the hub sees one (engine.bus.Listener)."""

    def __init__(self) -> None:
        self.frames: list[dict] = []
        self.changed = asyncio.Event()

    def deliver(self, seq: int, body: str) -> None:
        self.frames.append(json.loads(body))
        self.changed.set()

    def resync(self) -> None:
        pass


async def _dead_turn(redis_log, tenant, conversation) -> Message:  # noqa: F811
    """A dead process's turn: its question stored, the turn claimed, the question and the start of its reply
    ("About 5 kW") logged, never renewed nor released, and its lease run out. Returns the question."""

    def store_question() -> Message:
        with tenant_scope(tenant):
            return message_add(conversation=conversation, role=Role.USER, content="How much power?")

    question = await database_sync_to_async(store_question)()
    assert await redis_log.claim_turn(conversation.pk, question.pk) is None
    sink = ChannelSink(conversation.pk, redis_log)
    await sink.emit(frames.UserMessage(message_id=question.pk, content=question.content))
    await sink.emit(frames.Delta(index=0, content="About 5 kW"))
    await sink.flush()
    await asyncio.sleep(1.2)  # the lease runs out
    return question


async def test_the_hub_ends_a_dead_turn_when_a_page_opens_its_conversation(redis_log, tenant, conversation):  # noqa: F811
    assert redis_log.shared
    question = await _dead_turn(redis_log, tenant, conversation)

    page = Page()
    await hub_for(redis_log).listen(conversation.pk, page)
    async with asyncio.timeout(10):
        while not any(frame["type"] == "error" for frame in page.frames):
            page.changed.clear()
            await page.changed.wait()

    (done,) = [frame for frame in page.frames if frame["type"] == "done"]
    (error,) = [frame for frame in page.frames if frame["type"] == "error"]
    assert error["code"] == errors.INTERRUPTED
    assert error["user_message_id"] == question.pk

    def reply() -> Message:
        with tenant_scope(tenant):
            return Message.objects.get(conversation=conversation, role=Role.ASSISTANT)

    stored = await database_sync_to_async(reply)()
    assert (stored.content, stored.status, stored.error_code) == ("About 5 kW", MessageStatus.PARTIAL, "interrupted")
    assert done["message_id"] == stored.pk
    assert await redis_log.running_turn(conversation.pk) is None  # released once ended
    hub_for(redis_log).unlisten(conversation.pk, page)


async def test_one_call_tells_a_running_turn_from_a_dead_one_and_claims_the_dead(redis_log, conversation):  # noqa: F811
    """What a new message asks before it is stored (engine.turns): whether a turn runs, and when none does, the turn
    whose process died, adopted for the caller in the same call (its lease taken, so no other process ends it too)."""
    assert await redis_log.running_or_adopted(conversation.pk) == (None, None)
    assert await redis_log.claim_turn(conversation.pk, 41) is None
    assert await redis_log.running_or_adopted(conversation.pk) == (41, None)
    await asyncio.sleep(1.2)  # the lease runs out: its process died
    assert await redis_log.running_or_adopted(conversation.pk) == (None, 41)
    assert await redis_log.running_turn(conversation.pk) == 41  # adopted: leased again, for the caller
    assert await redis_log.adopt_orphans([conversation.pk]) == []
    await redis_log.release_turn(conversation.pk, 41)
    assert await redis_log.running_or_adopted(conversation.pk) == (None, None)


async def test_a_conversation_is_free_only_with_no_turn_running_or_dead(redis_log, conversation):  # noqa: F811
    """What admission reads before it stores a message in its own hop (turns.clear_to_store): a read that claims and
    adopts nothing, false for a running turn and for a dead one (which the usual path then ends)."""
    assert await redis_log.is_free(conversation.pk)
    assert await redis_log.claim_turn(conversation.pk, 41) is None
    assert not await redis_log.is_free(conversation.pk)
    await asyncio.sleep(1.2)  # the lease runs out: its process died, its open mark stays
    assert not await redis_log.is_free(conversation.pk)
    assert await redis_log.running_turn(conversation.pk) is None  # nothing was adopted by asking
    assert await redis_log.adopt_orphans([conversation.pk]) == [(conversation.pk, 41)]
    await redis_log.release_turn(conversation.pk, 41)
    assert await redis_log.is_free(conversation.pk)


async def test_a_new_message_ends_its_conversations_dead_turn_before_it_is_stored(redis_log, tenant, conversation):  # noqa: F811
    await _dead_turn(redis_log, tenant, conversation)

    with tenant_scope(tenant):
        submission = await submit_user_message(conversation=conversation, client_id="next-1", content="And now?")
        assert submission.outcome == Outcome.STARTED
        await submission.task

    def messages() -> list[tuple[str, str, str]]:
        with tenant_scope(tenant):
            rows = Message.objects.filter(conversation=conversation).order_by("id")
            return [(row.role, row.content, row.error_code) for row in rows]

    stored = await database_sync_to_async(messages)()
    assert stored[:3] == [
        (Role.USER, "How much power?", ""),
        (Role.ASSISTANT, "About 5 kW", "interrupted"),
        (Role.USER, "And now?", ""),
    ]

"""The database connection dropped in the middle of a turn (PostgreSQL: every backend of the test database
terminated while the model streams): the turn ends with a clear error or finishes on a fresh connection, the user's
message stays stored, and the conversation answers the next message."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
from django.db import OperationalError, connection, connections

from core.db import database_sync_to_async
from memory.models import Message
from tenants.scope import tenant_scope
from tests.chat.test_consumer import _connect, _send
from tests.chat.test_consumer import conversation as conversation  # the fixture
from tests.turns import wait_turns

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _postgresql_only(transactional_db, settings):
    if connection.vendor != "postgresql":
        pytest.skip("terminating database connections needs PostgreSQL")
    settings.CHAT_STREAM_PREFIX = f"test-dbdrop-{uuid.uuid4().hex[:8]}"
    yield
    # Every connection was terminated, the test's own and the pool's idle ones (with the pool's per-checkout check
    # off, DATABASE_HEALTH_CHECKS, each would fail once when next used): start the next test on fresh ones.
    for each in connections.all(initialized_only=True):
        with contextlib.suppress(Exception):
            each.close()
        if hasattr(each, "close_pool"):
            with contextlib.suppress(Exception):
                each.close_pool()


def _terminate_other_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


async def test_a_dropped_connection_mid_turn_keeps_the_message_and_the_conversation(member, tenant, conversation,
                                                                                    scripted_llm):  # fmt: skip
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 80, "delay": 0.02}})
    page = await _connect(member, tenant, conversation.pk)
    await page.send_json_to(_send("keep this question"))
    for _ in range(4):
        await page.receive_json_from(timeout=5)
    await asyncio.to_thread(_terminate_other_backends)
    frames = []
    while not frames or frames[-1]["type"] not in ("done", "error") or frames[-1].get("status") == "partial":
        frames.append(await page.receive_json_from(timeout=20))
    await asyncio.wait_for(wait_turns(), timeout=30)
    last = frames[-1]
    assert last["type"] == "done" or (last["type"] == "error" and last["message"])

    def stored() -> list[tuple[str, str]]:
        with tenant_scope(tenant):
            return list(Message.objects.filter(conversation=conversation).order_by("id").values_list("role", "content"))

    rows = await database_sync_to_async(stored)()
    assert rows[0] == ("user", "keep this question")
    scripted_llm.set_rules({"when": {}, "reply": {"text": "still here"}})
    await page.send_json_to(_send("and now?"))
    after = []
    while not after or after[-1]["type"] not in ("done", "error"):
        after.append(await page.receive_json_from(timeout=20))
    assert after[-1]["type"] == "done" and after[-1]["status"] == "complete"
    await page.disconnect()


def _select_one() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_sleep(0.05)")
        return cursor.fetchone()[0]


async def test_after_the_server_drops_every_connection_one_hop_fails_not_one_per_idle_connection():
    hop = database_sync_to_async(_select_one)
    await asyncio.gather(*(hop() for _ in range(6)))  # six hops at once: the pool keeps several connections idle
    await asyncio.to_thread(_terminate_other_backends)
    failed = 0
    for _ in range(6):
        try:
            assert await hop() == 1
        except OperationalError:
            failed += 1
    # The first hop to meet a dropped connection has the pool test its idle ones (core.db): the next hops work.
    assert failed <= 1

"""A Daphne process killed (SIGKILL) in the middle of a reply, with two running behind the same Redis: the turn's
lease runs out, the other process ends it as interrupted (the streamed text kept as a partial reply, the reason on
it), and the pages get its end: a page that reconnects to the other process at once, and a conversation nobody was
watching, ended when someone writes to it again. The user's messages stay and both conversations answer again."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from core.db import database_sync_to_async
from llm.errors import INTERRUPTED, message_for
from tests.chat.test_processes import Page, _messages, _setup
from tests.chat.test_processes import prefix as prefix  # the fixture
from tests.processes import daphne_servers, require_postgresql

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECONDS = 3


@pytest.fixture
def servers(redis_url, transactional_db, prefix, tmp_path):
    require_postgresql("Tests with Daphne processes")
    env = {"REDIS_URL": redis_url, "CHAT_STREAM_PREFIX": prefix, "LOG_LEVEL": "WARNING",
           "CHAT_TURN_LEASE_SECONDS": str(LEASE_SECONDS)}  # fmt: skip
    with daphne_servers(2, env=env, log_dir=tmp_path) as running:
        yield running


def _say(text: str) -> dict:
    return {"type": "user_message", "client_id": str(uuid.uuid4()), "content": text}


def _text(frames: list[dict]) -> str:
    return "".join(frame["content"] for frame in frames if frame["type"] == "delta" and frame["index"] == 0)


async def _opened(server, conversation_id: int, cookie: str, after_seq: int = 0) -> Page:
    page = await Page.open(server, conversation_id, cookie)
    assert (await page.receive())["type"] == "hello"
    await page.send({"type": "catch_up", "after_seq": after_seq})
    return page


async def test_a_reply_whose_process_is_killed_ends_interrupted_and_nothing_is_lost(servers, tenant, scripted_llm):
    a, b = servers
    scripted_llm.set_rules(
        {"when": {"last_message": "long"}, "reply": {"text_tokens": 600, "delay": 0.03}},
        {"when": {}, "reply": {"text": "Back: {last_message}"}},
    )
    [(_user, cookie)], [watched, unwatched] = await database_sync_to_async(_setup)(
        tenant, scripted_llm.base_url, conversations=2
    )
    page, other = await _opened(a, watched.pk, cookie), await _opened(a, unwatched.pk, cookie)
    await page.send(_say("a long answer please"))
    await other.send(_say("another long answer"))
    for each in (page, other):
        while len([f for f in each.frames if f["type"] == "delta"]) < 5:
            await each.receive()

    a.process.kill()  # SIGKILL: no release, no reply stored, no last frames
    a.process.wait(timeout=10)
    killed_at = time.monotonic()

    # The page reconnects to B at once, while the dead turn's lease still runs, and catches up from where it was.
    again = await _opened(b, watched.pk, cookie, after_seq=page.seqs()[-1])
    error = await again.until("error", timeout=LEASE_SECONDS * 4 + 10)
    seen = page.frames + again.frames
    assert [f["type"] for f in seen].count("done") == 1 and seen[-2]["type"] == "done" and seen[-1] is error
    assert seen[-2]["status"] == "partial" and error["code"] == INTERRUPTED
    assert error["message"] == message_for(INTERRUPTED, "zh-hans")  # the page's language
    assert seen == sorted(seen, key=lambda f: f["seq"]) and len({f["seq"] for f in seen}) == len(seen)
    streamed = _text(seen)
    assert len(streamed) > 0
    rows = await database_sync_to_async(_messages)(tenant, watched)
    assert [(m.role, m.status, m.error_code) for m in rows] == [
        ("user", "complete", ""), ("assistant", "partial", INTERRUPTED),
    ]  # fmt: skip
    assert rows[0].content == "a long answer please" and rows[1].content == streamed
    assert error["message_id"] == rows[1].pk == seen[-2]["message_id"] and error["user_message_id"] == rows[0].pk

    # Not stuck: the conversation answers on B.
    await again.send(_say("and now?"))
    done = await again.until("done")
    assert done["status"] == "complete"

    # Nobody watched the other conversation: once its lease ran out, writing to it on B ends the dead turn first.
    await asyncio.sleep(max(0.0, killed_at + LEASE_SECONDS + 0.5 - time.monotonic()))
    later = await _opened(b, unwatched.pk, cookie, after_seq=other.seqs()[-1])
    await later.send(_say("still there?"))
    while (await later.until("done"))["status"] != "complete":
        pass
    types = [(f["type"], f.get("code") or f.get("status")) for f in later.frames if f["type"] != "delta"]
    assert types[:2] == [("done", "partial"), ("error", INTERRUPTED)]
    assert types[2][0] == "user_message" and types[-1] == ("done", "complete")
    rows = await database_sync_to_async(_messages)(tenant, unwatched)
    assert [(m.role, m.content[:12] if m.role == "user" else m.status) for m in rows] == [
        ("user", "another long"), ("assistant", "partial"), ("user", "still there?"), ("assistant", "complete"),
    ]  # fmt: skip
    ended = next(n for n, f in enumerate(later.frames) if f["type"] == "error")
    assert rows[1].error_code == INTERRUPTED and rows[1].content == _text(other.frames + later.frames[:ended])
    assert rows[3].content == "Back: still there?"

    # Nothing runs any more in either conversation.
    for conversation in (watched, unwatched):
        check = await Page.open(b, conversation.pk, cookie)
        hello = await check.receive()
        assert hello["running"] is False
        await check.socket.close()
    for each in (page, other, again, later):
        await each.socket.close()

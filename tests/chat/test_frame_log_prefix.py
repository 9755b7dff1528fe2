"""One frame log per CHAT_STREAM_PREFIX, in memory as in Redis: a new prefix starts an empty log and leaves the
earlier one, with its subscribers, as it was.

The in-memory log used to be a single object that tests emptied by re-running its __init__, which also dropped the
feed of the live server's hub: every socket of the long-lived Daphne thread then stopped receiving frames, and the
browser tests run after the API tests waited for replies that were stored but never delivered."""

from __future__ import annotations

import uuid

import pytest

from engine import bus, streams


@pytest.fixture
def in_memory(settings):
    settings.REDIS_URL = ""
    return settings


async def test_a_new_prefix_is_a_new_empty_log_and_the_old_one_keeps_its_hub(in_memory):
    first_prefix = in_memory.CHAT_STREAM_PREFIX = f"test-prefix-{uuid.uuid4().hex[:8]}"
    first = streams.get_frame_log()
    assert isinstance(first, streams.MemoryFrameLog)
    delivered: list[tuple[int, str]] = []

    class Listener:
        def deliver(self, seq: int, body: str) -> None:
            delivered.append((seq, body))

        def resync(self) -> None:
            raise AssertionError("nothing was missed")

    await bus.hub_for(first).listen(7, Listener())
    await first.append_batch([(7, ['{"type":"delta","content":"a"}'])])

    in_memory.CHAT_STREAM_PREFIX = f"test-prefix-{uuid.uuid4().hex[:8]}"
    second = streams.get_frame_log()
    assert second is not first
    assert await second.last_seq(7) == 0 and await second.after(7, 0) == []  # nothing of the first prefix
    await second.append_batch([(7, ['{"type":"delta","content":"other"}'])])

    in_memory.CHAT_STREAM_PREFIX = first_prefix
    assert streams.get_frame_log() is first
    await first.append_batch([(7, ['{"type":"delta","content":"b"}'])])
    # The hub subscribed before the other prefix's log was made still gets the first log's frames, and only those.
    assert delivered == [(1, '{"type":"delta","content":"a"}'), (2, '{"type":"delta","content":"b"}')]

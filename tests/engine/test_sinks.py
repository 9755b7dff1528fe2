"""The chat socket's sink and the batching writer: a reply's first delta goes to the log at once (the time to the
first token is what a reader waits for), the deltas after it are merged and wait for the flush delay, and a frame
that ends a step sends what is pending with it."""

from __future__ import annotations

import asyncio

from agents import frames
from engine.sinks import ChannelSink
from engine.streams import MemoryFrameLog


def _contents(logged: list[frames.Logged]) -> list[tuple[str, str | None]]:
    return [(entry.frame.type, getattr(entry.frame, "content", None)) for entry in logged]


async def test_the_first_delta_is_logged_at_once_and_the_next_ones_wait_to_be_merged(settings):
    settings.CHAT_FLUSH_SECONDS = 5  # far longer than the test: only an urgent flush writes before the end
    log = MemoryFrameLog()
    sink = ChannelSink(7, log)
    await sink.emit(frames.Delta(content="Hel"))
    await asyncio.sleep(0.05)
    assert _contents(await log.after(7, 0)) == [("delta", "Hel")]

    await sink.emit(frames.Delta(content="lo, "))
    await sink.emit(frames.Delta(content="world"))
    await asyncio.sleep(0.2)
    assert len(await log.after(7, 0)) == 1  # merged, waiting for the flush delay

    done = await sink.emit(frames.Done(message_id=1, status="complete", usage={}))
    assert done.seq == 3
    assert _contents(await log.after(7, 0)) == [("delta", "Hel"), ("delta", "lo, world"), ("done", None)]


async def test_after_a_frame_that_is_not_a_delta_the_next_delta_is_first_again(settings):
    settings.CHAT_FLUSH_SECONDS = 5
    log = MemoryFrameLog()
    sink = ChannelSink(8, log)
    await sink.emit(frames.Delta(content="Looking it up."))
    await sink.emit(frames.Tool(call_id="c1", name="search", status=frames.ToolStatus.STARTED))
    await sink.emit(frames.Delta(content="Found"))
    await asyncio.sleep(0.05)
    assert [entry.frame.type for entry in await log.after(8, 0)] == ["delta", "tool", "delta"]


def test_a_sink_used_from_another_event_loop_writes_through_that_loops_writer():
    log = MemoryFrameLog()
    sink = ChannelSink(9, log)

    async def emit(text: str) -> None:
        await sink.emit(frames.Delta(content=text))
        await asyncio.sleep(0.01)  # the first delta is written; the next waits for the flush delay on the event
        await sink.emit(frames.Delta(content="!"))
        await sink.flush()

    asyncio.run(emit("one"))
    asyncio.run(emit("two"))  # another loop: the first loop's writer (its event is that loop's) cannot serve it
    logged = asyncio.run(log.after(9, 0))
    assert _contents(logged) == [("delta", "one"), ("delta", "!"), ("delta", "two!")]  # still streaming: merged

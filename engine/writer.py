"""A process's batching writer of the frame log: every running turn's frames, one frame-log call per flush.

Why batches: a streamed reply is a frame per token. Written one by one, each token cost a script call and a
channel-layer send per socket (about 4.5 ms of Daphne CPU a frame, measured). The writer merges a turn's
consecutive deltas and writes every pending frame of every conversation in one round trip, at most
CHAT_FLUSH_SECONDS after the first one; other frames (tool, step, done, error) are written at once, with the deltas
before them. The frame log numbers the batch and publishes it on the bus in the same call (engine.streams), and
each process's hub (engine.bus) hands it to that process's sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Any

from agents import frames
from core.conf import setting
from core.loopscoped import LoopScoped
from engine.streams import FrameLog, frame_body

logger = logging.getLogger("engine.bus")


class FrameWriter:
    """This event loop's batching writer (see the module docstring). One flush runs at a time, so a conversation's
    frames reach the log in the order they were written."""

    def __init__(self, log: FrameLog) -> None:
        self.log = log
        # conversation id -> pending [frame, future or None (a delta nobody waits for)], in write order.
        self.pending: dict[int, list[list[Any]]] = {}
        self.failures: dict[int, BaseException] = {}
        self.task: asyncio.Task | None = None
        self.urgent = asyncio.Event()

    def write(
        self, conversation_id: int, frame: frames.Frame, *, wait: bool, urgent: bool = False
    ) -> asyncio.Future | None:
        """Queue `frame` for the log. With `wait`, returns a future of the frame with its seq, and the flush starts
        at once; without, the frame may be merged into the delta before it and goes out within the flush delay,
        or at once when `urgent` (a reply's first delta: the time to its first token is what a reader waits)."""
        failure = self.failures.pop(conversation_id, None)
        if failure is not None:  # an earlier delta of this conversation was not written: say so now
            raise failure
        entries = self.pending.setdefault(conversation_id, [])
        future = None
        if not wait and entries and _mergeable(entries[-1], frame):
            entries[-1][0] = dataclasses.replace(entries[-1][0], content=entries[-1][0].content + frame.content)
        else:
            if wait:
                future = asyncio.get_running_loop().create_future()
                self.urgent.set()
            entries.append([frame, future])
        if urgent:
            self.urgent.set()
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())
        return future

    async def drain(self) -> None:
        """Return once nothing is pending."""
        while self.task is not None:
            await asyncio.shield(self.task)

    async def _run(self) -> None:
        try:
            while self.pending:
                if not self.urgent.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.urgent.wait(), setting("CHAT_FLUSH_SECONDS"))
                else:
                    await asyncio.sleep(0)  # let the turns that are ready now add their frames to this batch
                self.urgent.clear()
                batch, self.pending = self.pending, {}
                await self._flush(batch)
        finally:
            self.task = None

    async def _flush(self, batch: dict[int, list[list[Any]]]) -> None:
        try:
            firsts = await self.log.append_batch(
                [(conversation, [frame_body(frame) for frame, _ in entries]) for conversation, entries in batch.items()]
            )
        except Exception as exc:  # Redis unavailable: whoever waits gets the error; a delta's turn gets it next
            logger.warning("frame log write failed for %s conversation(s)", len(batch), exc_info=True)
            for conversation_id, entries in batch.items():
                waiting = [future for _frame, future in entries if future is not None]
                for future in waiting:
                    if not future.done():
                        future.set_exception(exc)
                if not waiting:
                    self.failures[conversation_id] = exc
            return
        for first, entries in zip(firsts, batch.values(), strict=True):
            for seq, (frame, future) in enumerate(entries, start=first):
                if future is not None and not future.done():
                    future.set_result(frames.Logged(seq, frame))


def _mergeable(entry: list[Any], frame: frames.Frame) -> bool:
    """A delta following a pending delta of the same index (and nobody waiting for the pending one)."""
    previous, future = entry
    return (
        future is None
        and isinstance(previous, frames.Delta)
        and isinstance(frame, frames.Delta)
        and previous.index == frame.index
    )


# This event loop's writer on each frame log (id(log) -> writer): a writer's futures and task belong to its loop.
_writers: LoopScoped[dict[int, FrameWriter]] = LoopScoped(dict)


def writer_for(log: FrameLog) -> FrameWriter:
    """This event loop's writer on `log`."""
    writers = _writers.get()
    writer = writers.get(id(log))
    if writer is None or writer.log is not log:
        writer = writers[id(log)] = FrameWriter(log)
    return writer

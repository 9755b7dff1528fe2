"""A process's side of the frame bus: one writer that batches every running turn's frames into one frame-log call
per flush, and one hub that hands what the bus carries to this process's sockets and running turns.

Why batches: a streamed reply is a frame per token. Written one by one, each token cost a script call and a
channel-layer send per socket (about 4.5 ms of Daphne CPU a frame, measured). The writer merges a turn's
consecutive deltas and writes every pending frame of every conversation in one round trip, at most
CHAT_FLUSH_SECONDS after the first one; other frames (tool, step, done, error) are written at once, with the deltas
before them. The frame log numbers the batch and publishes it on the bus in the same call (engine.streams).

Why a hub: each process subscribes to the bus once; the hub gives each frame to the sockets of its conversation in
this process (chat.consumers.ChatConsumer.deliver) and each stop request to the turn it names (engine.turns). Nothing
is dropped on the way: a socket that sees a seq jump reads the missing frames from the log, and after the bus
reconnected every socket catches up from the log. See docs/stream-protocol.md and docs/operations.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from agents import frames
from core.conf import setting
from core.registry import Slot
from engine.streams import FrameLog, frame_body, turn_lease_seconds

logger = logging.getLogger("engine.bus")

# engine.turns ends the dead turns a hub finds (end_interrupted_turns); it writes through this module's hubs and
# writers, so it fills this slot (engine.apps) instead of this module importing it back.
EndInterrupted = Callable[[FrameLog, list[int]], Awaitable[Any]]
interrupted_turns_ender: Slot[EndInterrupted] = Slot(
    "what ends a dead turn a hub finds (engine.bus)", filled_by="the engine app (engine.apps)"
)


class Listener(Protocol):
    """A socket of a conversation (chat.consumers.ChatConsumer)."""

    def deliver(self, seq: int, body: str) -> None:
        """A frame of the conversation: its seq and its JSON text (without seq). Called on the event loop."""

    def resync(self) -> None:
        """Frames may have been missed (the bus reconnected): catch up from the log."""


class Hub:
    """This event loop's registry of conversation listeners and stop callbacks, fed by the frame log's bus."""

    def __init__(self, log: FrameLog) -> None:
        self.log = log
        self.listeners: dict[int, set[Listener]] = {}
        self.stops: dict[tuple[int, int], Callable[[], None]] = {}
        self.members: dict[tuple[int, int], set[Callable[[], None]]] = {}
        self.unsubscribe = log.subscribe(self.feed)
        # Turns can outlive their process only in a shared store: there, look for dead ones (engine.turns).
        self.warden = asyncio.get_running_loop().create_task(self._warden()) if log.shared else None
        # Conversations whose first page just opened, looked at together (a storm of connects is one look, not one
        # frame-log call each).
        self.to_check: set[int] = set()
        self.checker: asyncio.Task | None = None

    async def listen(self, conversation_id: int, listener: Listener) -> None:
        """Deliver the conversation's frames to `listener` from now on (returns once the subscription is live, so
        a frame published after this call is delivered, and one published before is in the log)."""
        first = conversation_id not in self.listeners
        self.listeners.setdefault(conversation_id, set()).add(listener)
        if first and self.warden is not None:  # a page opening a conversation whose turn died: end it now
            self.to_check.add(conversation_id)
            if self.checker is None or self.checker.done():
                self.checker = asyncio.get_running_loop().create_task(self._check_opened())
        await self.log.subscribed()

    async def _check_opened(self) -> None:
        """End the dead turns of the conversations pages just opened, in one frame-log call per round."""
        while self.to_check:
            await asyncio.sleep(0)  # the connects of this moment join the round
            ids, self.to_check = sorted(self.to_check), set()
            await self._end_interrupted(ids)

    async def _warden(self) -> None:
        """Every third of a lease, end the dead turns of the conversations this process's sockets watch."""
        while True:
            await asyncio.sleep(turn_lease_seconds() / 3)
            if self.listeners:
                await self._end_interrupted(list(self.listeners))

    async def _end_interrupted(self, conversation_ids: list[int]) -> None:
        try:
            await interrupted_turns_ender.get()(self.log, conversation_ids)
        except Exception:  # the frame log is unavailable: the next round tries again
            logger.warning("could not look for interrupted turns", exc_info=True)

    def unlisten(self, conversation_id: int, listener: Listener) -> None:
        listeners = self.listeners.get(conversation_id)
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del self.listeners[conversation_id]

    def on_stop(self, conversation_id: int, turn_id: int, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` when a stop is requested for this turn (by any process); returns the cancel function."""
        key = (conversation_id, turn_id)
        self.stops[key] = callback
        return lambda: self.stops.pop(key, None)

    def on_access_change(self, user_id: int, tenant_id: int, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` when the user's membership of the tenant changes (FrameLog.access_changed, any process);
        returns the cancel function."""
        key = (user_id, tenant_id)
        self.members.setdefault(key, set()).add(callback)

        def cancel() -> None:
            callbacks = self.members.get(key)
            if callbacks is not None:
                callbacks.discard(callback)
                if not callbacks:
                    del self.members[key]

        return cancel

    def feed(self, message: str) -> None:
        if message.startswith("K "):
            _kind, user, tenant = message.split(" ")
            for callback in list(self.members.get((int(user), int(tenant)), ())):
                callback()
            return
        if message == "R":
            for listeners in list(self.listeners.values()):
                for listener in list(listeners):
                    listener.resync()
            return
        if message.startswith("S "):
            _kind, conversation, turn = message.split(" ")
            callback = self.stops.get((int(conversation), int(turn)))
            if callback is not None:
                callback()
            return
        for line in message.split("\n"):
            _kind, conversation, seq, body = line.split(" ", 3)
            listeners = self.listeners.get(int(conversation))
            if listeners:
                for listener in list(listeners):
                    listener.deliver(int(seq), body)


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

    def write(self, conversation_id: int, frame: frames.Frame, *, wait: bool) -> asyncio.Future | None:
        """Queue `frame` for the log. With `wait`, returns a future of the frame with its seq, and the flush starts
        at once; without, the frame may be merged into the delta before it and goes out within the flush delay."""
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


_hubs: weakref.WeakKeyDictionary[Any, dict[int, Hub]] = weakref.WeakKeyDictionary()
_writers: weakref.WeakKeyDictionary[Any, dict[int, FrameWriter]] = weakref.WeakKeyDictionary()


def hub_for(log: FrameLog) -> Hub:
    """This event loop's hub on `log`."""
    per_loop = _hubs.setdefault(asyncio.get_running_loop(), {})
    hub = per_loop.get(id(log))
    if hub is None or hub.log is not log:
        hub = per_loop[id(log)] = Hub(log)
    return hub


def writer_for(log: FrameLog) -> FrameWriter:
    """This event loop's writer on `log`."""
    per_loop = _writers.setdefault(asyncio.get_running_loop(), {})
    writer = per_loop.get(id(log))
    if writer is None or writer.log is not log:
        writer = per_loop[id(log)] = FrameWriter(log)
    return writer

"""A process's side of the frame bus: one hub per event loop that hands what the bus carries to this process's sockets
and running turns, and ends the turns whose process died among the conversations its sockets watch.

Each process subscribes to the bus once; the hub gives each frame to the sockets of its conversation in this process
(chat.consumers.ConversationSocket.deliver) and each stop request to the turn it names (engine.turns). Nothing is
dropped on the way: a socket that sees a seq jump reads the missing frames from the log, and after the bus
reconnected every socket catches up from the log. What the turns write reaches the log through the batching writer
(engine.writer). See docs/stream-protocol.md and docs/operations.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from core.loopscoped import LoopScoped
from engine.interrupted import end_interrupted_turns
from engine.streams import FrameLog, turn_lease_seconds

logger = logging.getLogger("engine.bus")


class Listener(Protocol):
    """A socket of a conversation (chat.consumers.ConversationSocket)."""

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
            await end_interrupted_turns(self.log, conversation_ids)
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


# This event loop's hub on each frame log (id(log) -> hub): a hub's subscription and tasks belong to its loop.
_hubs: LoopScoped[dict[int, Hub]] = LoopScoped(dict)


def hub_for(log: FrameLog) -> Hub:
    """This event loop's hub on `log`."""
    hubs = _hubs.get()
    hub = hubs.get(id(log))
    if hub is None or hub.log is not log:
        hub = hubs[id(log)] = Hub(log)
    return hub

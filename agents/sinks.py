"""Sinks that need no surface: one that keeps every frame (the API's blocking answers, tests), one that drops them
(work nobody watches), one that hands them to a reader (the API's streamed answers) and one that sends each frame
to two sinks. The chat websocket's sink is engine.sinks.ChannelSink."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from agents import frames


class CollectingSink:
    """Keeps the frames in order, numbering them from 1 as the frame log would."""

    def __init__(self) -> None:
        self.received: list[frames.Frame] = []

    async def emit(self, frame: frames.Frame) -> frames.Logged:
        self.received.append(frame)
        return frames.Logged(len(self.received), frame)

    def of_type(self, frame_type: type[frames.Frame]) -> list[Any]:
        return [frame for frame in self.received if isinstance(frame, frame_type)]

    @property
    def frames(self) -> list[dict[str, Any]]:
        """The frames as delivered: dicts with `seq`."""
        return [{"seq": seq, **frame.as_dict()} for seq, frame in enumerate(self.received, start=1)]

    def text(self, index: int = 0) -> str:
        """The deltas of one index, joined."""
        return "".join(frame.content for frame in self.of_type(frames.Delta) if frame.index == index)


class NullSink:
    """Drops every frame."""

    async def emit(self, frame: frames.Frame) -> frames.Logged:
        return frames.Logged(None, frame)


class _Emits(Protocol):
    async def emit(self, frame: frames.Frame) -> frames.Logged: ...


class QueueSink:
    """Puts every frame on an asyncio queue for a reader in the same event loop (a streamed HTTP answer)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[frames.Frame] = asyncio.Queue()

    async def emit(self, frame: frames.Frame) -> frames.Logged:
        self.queue.put_nowait(frame)
        return frames.Logged(None, frame)


class TeeSink:
    """Sends each frame to `first` (whose answer it returns: the frame log's seq) and then to `second`."""

    def __init__(self, first: _Emits, second: _Emits) -> None:
        self.first = first
        self.second = second

    async def emit(self, frame: frames.Frame) -> frames.Logged:
        delivered = await self.first.emit(frame)
        await self.second.emit(frame)
        return delivered

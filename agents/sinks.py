"""Sinks that need no surface: one that keeps every frame (the API's blocking answers, tests) and one that drops
them (work nobody watches). The chat websocket's sink is chat.sinks.ChannelSink."""

from __future__ import annotations

from typing import Any

from agents import frames


class CollectingSink:
    """Keeps the frames in order, numbering them from 1 as the frame log would."""

    def __init__(self) -> None:
        self.received: list[frames.Frame] = []

    async def emit(self, frame: frames.Frame) -> dict[str, Any]:
        self.received.append(frame)
        return {"seq": len(self.received), **frame.as_dict()}

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

    async def emit(self, frame: frames.Frame) -> dict[str, Any]:
        return frame.as_dict()

"""The chat surface's sink: every frame of a turn goes to the frame log (which numbers it) and to the conversation's
channel-layer group, whose sockets forward it to their browsers."""

from __future__ import annotations

import logging
from typing import Any

from channels.layers import get_channel_layer

from agents import frames
from chat.streams import FrameLog, get_frame_log, group_name
from core.markdown import render_markdown

logger = logging.getLogger("chat.sinks")


def page_frame(frame: frames.Frame) -> dict[str, Any]:
    """The frame as the page receives it: a reply's text (done) becomes its stored rendering as safe `html` (the raw
    text already went out as deltas); a step's result carries its rendering too, for the step card."""
    data = frame.as_dict()
    if isinstance(frame, frames.Done):
        data["html"] = str(render_markdown(data.pop("content")))
    elif isinstance(frame, frames.Step):
        data["html"] = str(render_markdown(frame.content))
    return data


class ChannelSink:
    """Implements agents.runtime.Sink for the websocket: log the frame (seq), then send it to the group."""

    def __init__(self, conversation_id: int, log: FrameLog | None = None) -> None:
        self.conversation_id = conversation_id
        self.log = log or get_frame_log()
        self.group = group_name(conversation_id)
        self.layer = get_channel_layer()

    async def emit(self, frame: frames.Frame) -> dict[str, Any]:
        logged = await self.log.append(self.conversation_id, page_frame(frame))
        try:
            await self.layer.group_send(self.group, {"type": "chat.frame", "frame": logged})
        except Exception:  # the frame is logged: sockets get it with catch_up; the turn goes on
            logger.exception("group send failed conversation=%s seq=%s", self.conversation_id, logged["seq"])
        return logged

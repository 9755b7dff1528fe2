"""The chat surface's sink: every frame of a turn goes to the frame log (which numbers it) and to the conversation's
channel-layer group, whose sockets forward it to their browsers."""

from __future__ import annotations

import logging
from typing import Any

from channels.layers import get_channel_layer

from chat.markdown import render_markdown
from chat.streams import FrameLog, get_frame_log, group_name

logger = logging.getLogger("chat.sinks")


class ChannelSink:
    """Implements agents.runtime.Sink for the websocket: log the frame (seq), then send it to the group."""

    def __init__(self, conversation_id: int, log: FrameLog | None = None) -> None:
        self.conversation_id = conversation_id
        self.log = log or get_frame_log()
        self.group = group_name(conversation_id)
        self.layer = get_channel_layer()

    async def emit(self, frame: dict[str, Any]) -> dict[str, Any]:
        if frame.get("type") == "done" and "content" in frame:
            # The page shows the stored reply as safe HTML; the raw text already went out as deltas.
            frame = {**frame}
            frame["html"] = str(render_markdown(frame.pop("content")))
        frame = await self.log.append(self.conversation_id, frame)
        try:
            await self.layer.group_send(self.group, {"type": "chat.frame", "frame": frame})
        except Exception:  # the frame is logged: sockets get it with catch_up; the turn goes on
            logger.exception("group send failed conversation=%s seq=%s", self.conversation_id, frame["seq"])
        return frame

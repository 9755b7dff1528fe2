"""The chat surface's sink: every frame of a turn goes to the frame log, which numbers it and publishes it on the bus
to the conversation's sockets in every process (engine.bus)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from agents import frames
from core.markdown import render_markdown
from engine.streams import FrameLog, get_frame_log
from engine.writer import FrameWriter, writer_for

logger = logging.getLogger("engine.sinks")


def page_frame(frame: frames.Frame) -> frames.Frame:
    """The frame as the page receives it: a reply's text (done) becomes its stored rendering as safe `html` (the raw
    text already went out as deltas); a step's result carries its rendering too, for the step card."""
    if isinstance(frame, frames.Done) and frame.content is not None:
        return dataclasses.replace(frame, content=None, html=str(render_markdown(frame.content)))
    if isinstance(frame, frames.Step):
        return dataclasses.replace(frame, html=str(render_markdown(frame.content)))
    return frame


class ChannelSink:
    """Implements agents.runtime.Sink for the websocket: the frame goes to the frame log through this process's
    batching writer (engine.writer), which numbers it and publishes it to every socket of the conversation.

    A delta returns at once (it may be merged with the next ones; its seq is given at the flush); any other frame
    waits until it is logged and returns it with its seq, so the turn's end is stored before the turn ends.

    When the frame log is unavailable (Redis restarting), the frame is not logged and the turn goes on: its reply
    is stored in the database all the same, and a page reads it from there when it loads (the live frames of
    those seconds are what is lost, never the reply)."""

    def __init__(self, conversation_id: int, log: FrameLog | None = None) -> None:
        self.conversation_id = conversation_id
        self.log = log or get_frame_log()
        # The event loop's writer, kept with its loop (looked up through core.loopscoped per token it was 3 % of a
        # busy process's CPU with 200 replies streaming); a sink used from another loop looks it up again.
        self.writer: FrameWriter | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.streaming = False  # a delta was written: the next ones may wait for the flush delay

    async def emit(self, frame: frames.Frame) -> frames.Logged:
        shown = page_frame(frame)
        loop = asyncio.get_running_loop()
        if self.writer is None or loop is not self.loop:
            self.writer, self.loop = writer_for(self.log), loop
        writer = self.writer
        try:
            if isinstance(frame, frames.Delta):
                writer.write(self.conversation_id, shown, wait=False, urgent=not self.streaming)
                self.streaming = True
                return frames.Logged(None, shown)
            self.streaming = False
            return await writer.write(self.conversation_id, shown, wait=True)
        except Exception:
            logger.warning(
                "frame log unavailable: a %s frame of conversation %s was not logged; the turn goes on",
                frame.type,
                self.conversation_id,
                exc_info=True,
            )
            return frames.Logged(None, shown)

    async def flush(self) -> None:
        """Return once every frame emitted so far is logged (a caller that ends its event loop after deltas)."""
        await writer_for(self.log).drain()

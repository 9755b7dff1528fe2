"""Progress of an agent's turn, as MCP `notifications/progress` on a tools/call's SSE answer.

A call whose request carries `_meta.progressToken` (and whose client accepts text/event-stream) is answered as an
SSE stream (api.mcp_server); while the turn runs, the turn's frames are read here (`emit`, the engine's Sink) and a
notification says what happens: the turn started, a tool or workflow step runs or ended, so many characters of the
reply so far, and, when nothing happened for HEARTBEAT_SECONDS, that the agent is still working. The notifications
go out from a task of their own, at most one every MIN_INTERVAL_SECONDS: the turn never waits for the client.
`progress` counts the notifications (the spec asks only that it grows; a turn's total is not known beforehand).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from enum import StrEnum
from typing import Any

from django.utils import translation
from django.utils.translation import gettext as _

from agents import frames
from agents.tools import tool_labels
from core.db import database_sync_to_async
from tenants.models import Tenant
from tenants.scope import tenant_scope

logger = logging.getLogger("api.mcp")

HEARTBEAT_SECONDS = 4.0  # below httpx's default read timeout (5 s): a client left at its defaults keeps reading
MIN_INTERVAL_SECONDS = 0.5


class Event(StrEnum):
    """What the last notification is about."""

    STARTED = "started"
    TOOL = "tool"
    REPLY = "reply"
    STILL = "still"


def _labels(tenant: Tenant, language: str) -> dict[str, str]:
    with tenant_scope(tenant):
        return tool_labels(language, tenant=tenant)


class TurnProgress:
    """Implements agents.runtime.Sink beside the turn's own: reads its frames, reports them as progress."""

    def __init__(self, session: Any, token: str | int, request_id: Any, tenant: Tenant, language: str) -> None:
        self.session, self.token, self.request_id = session, token, request_id
        self.tenant, self.language = tenant, language
        self.changed = asyncio.Event()
        self.characters = 0
        self.tool: frames.Tool | None = None
        self.event = Event.STARTED
        self.sent = 0
        self.started = time.monotonic()
        self.labels: dict[str, str] | None = None
        self.task: asyncio.Task | None = None

    async def emit(self, frame: frames.Frame) -> frames.Logged:
        if isinstance(frame, frames.Delta):
            self.characters += len(frame.content)
            self.event = Event.REPLY
            self.changed.set()
        elif isinstance(frame, frames.Tool):
            self.tool, self.event = frame, Event.TOOL
            self.changed.set()
        return frames.Logged(None, frame)

    def start(self) -> None:
        self.changed.set()  # the first notification at once: the stream is alive
        self.task = asyncio.get_running_loop().create_task(self._report(), name="mcp-progress")

    async def stop(self) -> None:
        """Stop reporting (before the result goes out, so that it is the stream's last message)."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _report(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.changed.wait(), HEARTBEAT_SECONDS)
            except TimeoutError:
                self.event = Event.STILL
            self.changed.clear()
            try:
                await self._send()
            except Exception:  # the client left, or its stream broke: the turn goes on, its reply is stored
                logger.info("MCP progress notification not sent; no more for this call", exc_info=True)
                return
            await asyncio.sleep(MIN_INTERVAL_SECONDS)

    async def _send(self) -> None:
        if self.event == Event.TOOL and self.labels is None:
            self.labels = await database_sync_to_async(_labels)(self.tenant, self.language)
        with translation.override(self.language):
            message = self._message()
        self.sent += 1
        await self.session.send_progress_notification(
            self.token, float(self.sent), message=message, related_request_id=str(self.request_id)
        )

    def _message(self) -> str:
        if self.event == Event.STARTED:
            return _("The agent is working on it.")
        if self.event == Event.REPLY:
            return _("Writing the reply: %(count)d characters so far.") % {"count": self.characters}
        if self.event == Event.STILL:
            seconds = round(time.monotonic() - self.started)
            return _("Still working (%(seconds)d s).") % {"seconds": seconds}
        tool = self.tool
        name = (self.labels or {}).get(tool.tool or tool.name, tool.name) if tool else ""
        if tool is not None and tool.status == frames.ToolStatus.STARTED:
            return _("Running “%(name)s”.") % {"name": name}
        if tool is not None and tool.status == frames.ToolStatus.COMPLETED:
            return _("“%(name)s” done.") % {"name": name}
        return _("“%(name)s” did not finish.") % {"name": name}

"""Helpers for tests that run agent turns directly: a sink that keeps the frames, and one user turn."""

from __future__ import annotations

from agents import frames
from agents.sinks import CollectingSink
from core.db import database_sync_to_async
from llm.client import flush_records


class Collector(CollectingSink):
    """The collecting sink, refusing anything but a typed frame, with the tests' shorthands."""

    async def emit(self, frame: frames.Frame) -> frames.Logged:
        assert isinstance(frame, frames.Frame), f"a runner emitted {frame!r} instead of a typed frame"
        return await super().emit(frame)

    def of(self, kind: str) -> list[dict]:
        return [frame for frame in self.frames if frame["type"] == kind]

    def types(self) -> list[str]:
        return [frame["type"] for frame in self.frames]

    def tools(self) -> list[tuple[str, str]]:
        """(name, status) of every tool call that finished, in order."""
        return [(f["name"], f["status"]) for f in self.frames if f["type"] == "tool" and f["status"] != "started"]


async def user_turn(tenant, conversation, text: str, *, stop=None, client_id: str | None = None):
    """Store `text` as the user's message and run the turn; returns (user message, reply, sink), the TurnResult
    as `sink.result`."""
    from agents.runtime import run_turn
    from memory.services import message_add
    from tenants.scope import tenant_scope

    def add():
        with tenant_scope(tenant):
            return message_add(conversation=conversation, role="user", content=text, client_id=client_id)

    user = await database_sync_to_async(add)()
    sink = Collector()
    with tenant_scope(tenant):
        sink.result = await run_turn(conversation=conversation, user_message=user, sink=sink, stop=stop)
        await flush_records()
    return user, sink.result.message, sink

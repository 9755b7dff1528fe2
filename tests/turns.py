"""Helpers for tests that run agent turns directly: a sink that keeps the frames, one user turn, and waits for the
background work a turn leaves (the chat turns of this event loop, the model-call records being written)."""

from __future__ import annotations

import asyncio

from agents import frames
from agents.sinks import CollectingSink
from core.db import database_sync_to_async
from engine import turns
from llm import client


async def wait_turns() -> None:
    """Wait for the chat turns this event loop is running (engine.turns keeps them)."""
    loop = asyncio.get_running_loop()
    pending = [task for task in turns._tasks if task.get_loop() is loop]
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


async def flush_records() -> None:
    """Wait for the model-call records this event loop is still writing (llm.client writes them in the background)."""
    loop = asyncio.get_running_loop()
    pending = [task for task in client._pending_records if task.get_loop() is loop]
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


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

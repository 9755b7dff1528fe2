"""Helpers for tests that run agent turns directly: a sink that keeps the frames, and one user turn."""

from __future__ import annotations

from llm.client import database_sync_to_async, flush_records


class Collector:
    """A sink that keeps the frames, numbered like the chat frame log does."""

    def __init__(self) -> None:
        self.frames: list[dict] = []

    async def emit(self, frame: dict) -> dict:
        frame = {"seq": len(self.frames) + 1, **frame}
        self.frames.append(frame)
        return frame

    def of(self, kind: str) -> list[dict]:
        return [frame for frame in self.frames if frame["type"] == kind]

    def types(self) -> list[str]:
        return [frame["type"] for frame in self.frames]

    def tools(self) -> list[tuple[str, str]]:
        """(name, status) of every tool call that finished, in order."""
        return [(f["name"], f["status"]) for f in self.frames if f["type"] == "tool" and f["status"] != "started"]


async def user_turn(tenant, conversation, text: str, *, stop=None, client_id: str | None = None):
    """Store `text` as the user's message and run the turn; returns (user message, reply, sink)."""
    from agents.runtime import run_turn
    from memory.services import message_add
    from tenants.scope import tenant_scope

    def add():
        with tenant_scope(tenant):
            return message_add(conversation=conversation, role="user", content=text, client_id=client_id)

    user = await database_sync_to_async(add)()
    sink = Collector()
    with tenant_scope(tenant):
        reply = await run_turn(conversation=conversation, user_message=user, sink=sink, stop=stop)
        await flush_records()
    return user, reply, sink

"""The one way an agent calls a model: `AgentModel`, filled once from the agent's configuration.

Whatever kind of turn makes the call (the tool loop of chat and ReAct agents, a workflow's llm step, the planner
and its finalizer, a goal run, a tool that asks another model such as deep_think), it builds a
`llm.options.ChatRequest` (the messages, tools and fields it asks) and sends it through the turn's `AgentModel`
(`TurnContext.model`, or `AgentModel.of(config, ...)` for a goal run). The seam fills what the caller does not
choose: the tenant, provider and model, the agent and conversation the call record names, the purpose, the agent's
temperature, the agent's longest reply (`max_reply_tokens`) and the turn's stop signal.

The longest reply bounds every call of a chat, ReAct or workflow agent's turn, tools' calls included; a planner's and
a goal agent's own calls are not bounded (docs/api.md): their replies are plans and tool calls, which a cut would leave
unreadable.

A turn binds its `AgentModel` while it runs (`TurnRunner.execute`), so a tool that calls a model finds it with
`for_tool` without the tool's call context carrying it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from agents.models import AgentKind
from llm.client import ChatResult, Event, complete_chat, stream_chat
from llm.models import ModelProvider, Purpose
from llm.options import ChatRequest

if TYPE_CHECKING:
    from agents.config import AgentConfig
    from agents.tools.base import ToolCallContext
    from tenants.models import Tenant

# The kinds whose own calls the agent's longest reply does not bound: a plan (JSON arguments of create_plan) or a
# goal run's tool call cut short could not be read (docs/api.md, the max_tokens row).
UNCAPPED_KINDS = frozenset({AgentKind.PLANNER, AgentKind.GOAL})


@dataclass(frozen=True)
class AgentModel:
    """An agent's model as its turn (or run) calls it: who pays, which provider and model, what the call record
    names, and the agent's own temperature, longest reply and stop signal."""

    tenant: Tenant
    provider: ModelProvider | None
    model: str
    agent_id: int | None = None
    conversation_id: int | None = None
    purpose: str = Purpose.CHAT
    temperature: float | None = None  # the agent's: a request that sets none is sent with it
    reply_cap: int | None = None  # the agent's longest reply in tokens (None: no cap)
    cancel: asyncio.Event | None = None

    @classmethod
    def of(
        cls,
        config: AgentConfig,
        *,
        tenant: Tenant,
        conversation_id: int | None = None,
        cancel: asyncio.Event | None = None,
        model: str | None = None,
        purpose: str = Purpose.CHAT,
    ) -> AgentModel:
        """The model calls of the agent `config` describes (`model`: another of its provider's, a tier's)."""
        capped = config.kind not in UNCAPPED_KINDS
        return cls(
            tenant=tenant,
            provider=config.provider,
            model=model or config.model,
            agent_id=config.agent_id,
            conversation_id=conversation_id,
            purpose=purpose,
            temperature=config.temperature,
            reply_cap=config.max_reply_tokens if capped else None,
            cancel=cancel,
        )

    def on(self, provider: ModelProvider | None, model: str, *, purpose: str | None = None) -> AgentModel:
        """The same agent's calls on another model (a tier's: planning, execution, reasoning), which runs with its
        own default temperature; the longest reply and the stop signal stay the agent's."""
        return replace(self, provider=provider, model=model, purpose=purpose or self.purpose, temperature=None)

    def request(self, request: ChatRequest) -> ChatRequest:
        """`request` as it is sent: with the agent's temperature when it sets none, and within its longest reply."""
        if request.temperature is None and self.temperature is not None:
            request = replace(request, temperature=self.temperature)
        return request.within(self.reply_cap)

    def _call(self) -> dict[str, Any]:
        """Who pays, which model, what the call record names, and the stop signal: llm.client's keyword arguments."""
        return {
            "tenant": self.tenant,
            "provider": self.provider,
            "model": self.model or None,
            "purpose": self.purpose,
            "agent_id": self.agent_id,
            "conversation_id": self.conversation_id,
            "cancel": self.cancel,
        }

    def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        """Stream the reply to `request` (llm.client.stream_chat's events)."""
        return stream_chat(self.request(request), **self._call())

    async def complete(self, request: ChatRequest) -> ChatResult:
        """The whole reply to `request`."""
        return await complete_chat(self.request(request), **self._call())


_bound: ContextVar[AgentModel | None] = ContextVar("agents.modelcall.bound", default=None)


@contextmanager
def bound(model: AgentModel) -> Iterator[AgentModel]:
    """`model` is the running turn's (or run's) while the block runs: tools it calls reach it through `for_tool`."""
    token = _bound.set(model)
    try:
        yield model
    finally:
        _bound.reset(token)


def for_tool(call: ToolCallContext, provider: ModelProvider | None, model: str, *, purpose: str) -> AgentModel:
    """The model call of a tool that asks `model`: the running turn's agent, conversation, longest reply and stop
    signal on that model; outside a turn of the call's agent, only what the call context names."""
    running = _bound.get()
    if running is not None and running.agent_id == call.agent_id and running.tenant.pk == call.tenant.pk:
        return running.on(provider, model, purpose=purpose)
    return AgentModel(
        tenant=call.tenant,
        provider=provider,
        model=model,
        agent_id=call.agent_id,
        conversation_id=call.conversation_id,
        purpose=purpose,
    )


def for_run(model: AgentModel) -> AgentModel:
    """A run's model (a workflow's llm steps): `model`, counted as the running turn's calls are when it runs inside a
    turn of the same agent (the turn's usage is every model call it made, docs/api.md)."""
    running = _bound.get()
    if running is None or running.agent_id != model.agent_id or running.tenant.pk != model.tenant.pk:
        return model
    values = {item.name: getattr(model, item.name) for item in fields(AgentModel)}
    return replace(running, **values)

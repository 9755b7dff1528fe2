"""The turn runtime: one chat turn from a stored user message to a stored assistant message, as stream frames.

`run_turn` reads the conversation's configuration and context (one database hop), streams the model's reply through
`llm.client.stream_chat` and writes each piece to a `Sink` as a frame (no database work per delta), then stores the
reply (one hop). The sink is the surface's business: the chat websocket logs and broadcasts frames, a test collects
them. The runtime never imports the surface (floor 3 sits below chat/).

Frames (the surface adds `seq`, and may replace `content` of the done frame with rendered `html`):
delta, tool (started/completed), step, done, error; see docs/stream-protocol.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from llm import errors
from llm.client import database_sync_to_async
from llm.errors import LLMError
from llm.models import ModelProvider
from llm.selectors import default_provider
from memory.models import Conversation, Message, MessageStatus
from memory.services import assistant_message_finish, context_build

logger = logging.getLogger("agents.runtime")


class Sink(Protocol):
    """Where a turn writes its frames. `emit` returns the frame as delivered (with `seq`, when the sink numbers)."""

    async def emit(self, frame: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TurnSetup:
    """What one turn needs, read in one database hop before the model is called."""

    provider: ModelProvider | None
    model: str
    temperature: float | None
    messages: list[dict[str, Any]]
    strategy: dict[str, Any]
    tools: list[Any] = field(default_factory=list)
    text_protocol: bool = False
    tool_context: dict[str, Any] = field(default_factory=dict)
    language: str = "en"


def _snapshot(conversation: Conversation) -> dict[str, Any]:
    version = conversation.version
    return version.snapshot if version is not None else conversation.agent.snapshot()


def _language(snapshot: dict[str, Any]) -> str:
    """The conversation's language for tool descriptions: Chinese when the agent's prompt is, else the active one."""
    from django.utils.translation import get_language

    prompt = snapshot.get("system_prompt") or ""
    if any("\u4e00" <= char <= "\u9fff" for char in prompt):
        return "zh-hans"
    return get_language() or "en"


KNOWLEDGE_TOOL = "plugin_ai_knowledge_base_query"


def _stored_tool_context(conversation: Conversation) -> dict[str, Any]:
    # Read afresh: conversation.context may be a cached instance from an earlier turn.
    from memory.models import ConversationContext

    value = ConversationContext.objects.filter(conversation=conversation).values_list("tool_context", flat=True).first()
    return value if isinstance(value, dict) else {}


def turn_setup(*, conversation: Conversation) -> TurnSetup:
    """The model, its parameters, the agent's tools and the context (one system message first) of the next turn.

    For a model whose provider entry says `function_calling: false`, the agent's tools are offered through seed 1's
    text protocol: its prompt becomes the system prompt and the history is written in the protocol's text.
    """
    from agents import textprotocol
    from agents.tools import tools_for

    snapshot = _snapshot(conversation)
    tenant = conversation.tenant  # loaded here, so the async caller reads it without a query
    provider = conversation.provider or default_provider(tenant=tenant)
    model = conversation.model or snapshot.get("model") or (provider.default_chat_model if provider else "")
    tool_names = list(snapshot.get("tools") or [])
    if snapshot.get("knowledge_base_ids") and KNOWLEDGE_TOOL not in tool_names:
        tool_names.append(KNOWLEDGE_TOOL)  # an agent with knowledge bases can always search them
    tools = tools_for(tool_names)
    language = _language(snapshot)
    text_protocol = bool(tools) and provider is not None and not provider.supports_function_calling(model)
    prompt = snapshot.get("system_prompt") or ""
    if text_protocol:
        prompt = textprotocol.system_prompt(role=prompt, tools=tools, language=language)
    built = context_build(conversation=conversation, system_prompt=prompt, model=model)
    window = built.window
    messages = textprotocol.to_text_messages(built.messages) if text_protocol else built.messages
    context = conversation.context
    strategy = {
        "name": context.strategy,
        "triggered": window.triggered,
        "tokens_saved": window.tokens_saved,
        "summarized": bool(window.summarize_ids),
    }
    temperature = snapshot.get("temperature")
    return TurnSetup(
        provider=provider,
        model=model,
        temperature=float(temperature) if temperature is not None else None,
        messages=messages,
        strategy=strategy,
        tools=tools,
        text_protocol=text_protocol,
        tool_context=dict(_stored_tool_context(conversation) if tools else {}),
        language=language,
    )


def _no_provider() -> LLMError:
    from django.utils.translation import gettext

    return LLMError(
        errors.BAD_REQUEST,
        gettext("This tenant has no model provider: add one in Models > Model providers."),
    )


TurnRunner = Callable[..., Awaitable[Message]]
_runners: dict[str, TurnRunner] = {}


def register_turn_runner(kind: str, runner: TurnRunner) -> None:
    """Let `runner` answer the turns of agents of `kind`. It is called with the keywords of `run_turn`."""
    _runners[kind] = runner


def _agent_kind(conversation: Conversation) -> str:
    return str(_snapshot(conversation).get("kind") or "chat")


async def run_turn(
    *,
    conversation: Conversation,
    user_message: Message,
    sink: Sink,
    stop: asyncio.Event | None = None,
    index: int = 0,
) -> Message:
    """Answer the stored `user_message`: stream frames to `sink`, store and return the assistant message.

    The runner registered for the agent's kind (from the conversation's version snapshot) does the work; chat and
    ReAct agents, and any unregistered kind, use the tool loop (agents.toolloop). Never raises for a model
    failure: the reply is stored partial (or as an error) with its code and an error frame ends the turn. Setting
    `stop` ends the reply at the next chunk with code `cancelled`. Cancelling the task stores what arrived (code
    `cancelled`) and re-raises.
    """
    from agents.toolloop import run_tool_loop

    kind = await database_sync_to_async(_agent_kind)(conversation)
    runner = _runners.get(kind, run_tool_loop)
    return await runner(conversation=conversation, user_message=user_message, sink=sink, stop=stop, index=index)


async def _failed(
    conversation: Conversation,
    user_message: Message,
    sink: Sink,
    index: int,
    text: str,
    code: str,
    *,
    setup: TurnSetup | None,
    emit: bool = True,
) -> Message:
    """Store what arrived with the error code; tell the sink (a done frame for partial text, then the error)."""
    message = await database_sync_to_async(assistant_message_finish)(
        conversation=conversation, content=text, error_code=code
    )
    if not emit:
        return message
    partial = message.status == MessageStatus.PARTIAL
    if partial:
        await sink.emit(
            {
                "type": "done",
                "index": index,
                "message_id": message.pk,
                "status": MessageStatus.PARTIAL,
                "usage": {"prompt_tokens": 0, "completion_tokens": 0},
                "content": text,
                "strategy": setup.strategy if setup is not None else None,
            }
        )
    await sink.emit(
        {
            "type": "error",
            "index": index,
            "code": code,
            "message": errors.message_for(code),
            "message_id": message.pk if partial else None,
            "user_message_id": user_message.pk,
        }
    )
    return message

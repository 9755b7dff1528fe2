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
from dataclasses import dataclass
from typing import Any, Protocol

from llm import errors
from llm.client import Finished, TextDelta, ToolCallsReady, ToolCallStarted, database_sync_to_async, stream_chat
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


def _snapshot(conversation: Conversation) -> dict[str, Any]:
    version = conversation.version
    return version.snapshot if version is not None else conversation.agent.snapshot()


def turn_setup(*, conversation: Conversation) -> TurnSetup:
    """The model, its parameters and the context (one system message first) of the conversation's next turn."""
    snapshot = _snapshot(conversation)
    tenant = conversation.tenant  # loaded here, so the async caller reads it without a query
    provider = conversation.provider or default_provider(tenant=tenant)
    model = conversation.model or snapshot.get("model") or (provider.default_chat_model if provider else "")
    built = context_build(conversation=conversation, system_prompt=snapshot.get("system_prompt") or "", model=model)
    window = built.window
    strategy = {
        "name": conversation.context.strategy,
        "triggered": window.triggered,
        "tokens_saved": window.tokens_saved,
        "summarized": bool(window.summarize_ids),
    }
    temperature = snapshot.get("temperature")
    return TurnSetup(
        provider=provider,
        model=model,
        temperature=float(temperature) if temperature is not None else None,
        messages=built.messages,
        strategy=strategy,
    )


def _no_provider() -> LLMError:
    from django.utils.translation import gettext

    return LLMError(
        errors.BAD_REQUEST,
        gettext("This tenant has no model provider: add one in Models > Model providers."),
    )


async def run_turn(
    *,
    conversation: Conversation,
    user_message: Message,
    sink: Sink,
    stop: asyncio.Event | None = None,
    index: int = 0,
) -> Message:
    """Answer the stored `user_message`: stream frames to `sink`, store and return the assistant message.

    Never raises for a model failure: the reply is stored partial (or as an error) with its code and an error frame
    ends the turn. Setting `stop` ends the reply at the next chunk with code `cancelled`. Cancelling the task stores
    what arrived (code `cancelled`) and re-raises.
    """
    parts: list[str] = []
    setup: TurnSetup | None = None
    try:
        setup = await database_sync_to_async(turn_setup)(conversation=conversation)
        if setup.provider is None:
            raise _no_provider()
        if stop is not None and stop.is_set():
            raise LLMError(errors.CANCELLED)
        finished: Finished | None = None
        async for event in stream_chat(
            tenant=conversation.tenant,
            provider=setup.provider,
            model=setup.model,
            messages=setup.messages,
            temperature=setup.temperature,
            agent_id=conversation.agent_id,
            conversation_id=conversation.pk,
            cancel=stop,
        ):
            if isinstance(event, TextDelta):
                parts.append(event.text)
                await sink.emit({"type": "delta", "index": index, "content": event.text})
            elif isinstance(event, ToolCallStarted):
                await sink.emit(
                    {"type": "tool", "index": index, "name": event.name, "status": "started", "arguments": {}}
                )
            elif isinstance(event, ToolCallsReady):
                # Tools run in a later issue: the calls are shown as progress and the turn ends with the text.
                for call in event.tool_calls:
                    await sink.emit(
                        {
                            "type": "tool",
                            "index": index,
                            "name": call.name,
                            "status": "completed",
                            "arguments": call.parsed_arguments or {},
                        }
                    )
            elif isinstance(event, Finished):
                finished = event
    except LLMError as exc:
        text = exc.partial_text or "".join(parts)
        return await _failed(conversation, user_message, sink, index, text, exc.code, setup=setup)
    except asyncio.CancelledError:
        await asyncio.shield(
            _failed(conversation, user_message, sink, index, "".join(parts), errors.CANCELLED, setup=setup, emit=False)
        )
        raise
    except Exception:
        logger.exception("turn failed conversation=%s", conversation.pk)
        return await _failed(
            conversation, user_message, sink, index, "".join(parts), errors.PROVIDER_ERROR, setup=setup
        )

    assert finished is not None  # stream_chat always ends with Finished or raises
    text = finished.text
    usage = {
        "prompt_tokens": finished.usage.prompt_tokens,
        "completion_tokens": finished.usage.completion_tokens,
        "llm_call_id": await finished.recorded(),
    }
    message = await database_sync_to_async(assistant_message_finish)(
        conversation=conversation, content=text, usage=usage
    )
    await sink.emit(
        {
            "type": "step",
            "index": index,
            "status": "completed",
            "agentChatResponse": {"content": text, "intent": "chat", "data": {}},
        }
    )
    await sink.emit(
        {
            "type": "done",
            "index": index,
            "message_id": message.pk,
            "status": MessageStatus.COMPLETE,
            "usage": {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"]},
            "content": text,
            "strategy": setup.strategy,
        }
    )
    return message


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

"""What a turn's and a tool call's spans say (core.tracing; GenAI semantic conventions, docs/observability.md).

The hooks are one decorator line each (agents.runtime.run_turn, agents.tools.invoke.invoke_tool); the attributes
are read here, only when traces are on. Text (the user's message, the reply, tool arguments and results) only with
TRACES_CAPTURE_CONTENT."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core import tracing
from llm.messages import ChatMessage, wire


def turn_name(*, conversation: Any, **_: Any) -> str:
    return "invoke_agent"


def turn_identity(*, conversation: Any, user_message: Any, **_: Any) -> dict[str, Any]:
    """The turn's who and where, copied onto every span of the turn."""
    return {
        "agentplat.tenant.id": str(conversation.tenant_id),
        "gen_ai.agent.id": str(conversation.agent_id) if conversation.agent_id else None,
        "gen_ai.conversation.id": str(conversation.pk),
        "user.id": str(conversation.user_id) if conversation.user_id else None,
    }


def turn_attributes(*, conversation: Any, user_message: Any, **kwargs: Any) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "invoke_agent",
        "agentplat.message.id": user_message.pk,
        "agentplat.turn.index": kwargs.get("index", 0),
        "agentplat.conversation.parent_id": conversation.parent_id,
        "gen_ai.input.messages": _text_of(ChatMessage.user, user_message.content),
    }


def turn_config(config: Any) -> dict[str, Any]:
    """What the turn learns once its agent's configuration is read."""
    return {
        "gen_ai.agent.name": config.name,
        "agentplat.agent.kind": config.kind,
        "agentplat.agent.version_id": config.version_id,
        "gen_ai.request.model": config.model or None,
    }


def turn_result(result: Any) -> dict[str, Any]:
    usage = result.usage
    return {
        "agentplat.turn.status": str(result.status),
        "error.type": result.error_code or None,
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
        "agentplat.reply.message_id": result.message.pk if result.message is not None else None,
        "gen_ai.output.messages": _text_of(ChatMessage.assistant, result.message.content),
    }


def tool_name(tool: Any, *, name: str, **_: Any) -> str:
    return f"execute_tool {name}"


def tool_attributes(tool: Any, *, name: str, arguments: Any, call: Any, **_: Any) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
        "agentplat.tool.known": tool is not None,
        "gen_ai.tool.call.arguments": tracing.text(arguments),
    }


def tool_outcome(outcome: Any) -> dict[str, Any]:
    return {
        "agentplat.tool.status": outcome.status,
        "error.type": "tool_error" if not outcome.ok else None,
        "agentplat.tool.asks_user": bool(outcome.ask_user),
        "gen_ai.tool.call.result": tracing.text(outcome.text),
    }


def _text_of(make: Callable[[str], ChatMessage], content: str) -> str | None:
    """The message `make(content)` in the request's wire form, when content capture is on (else nothing is made)."""
    return tracing.text(wire([make(content)])) if tracing.capture_content() else None

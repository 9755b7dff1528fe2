"""What a model call's span says (core.tracing; GenAI semantic conventions, docs/observability.md).

`stream_chat` carries one decorator line; its span starts with the request and ends with the last event: the model,
the tokens, the time to the first chunk and the finish reason. Messages and the reply only with
TRACES_CAPTURE_CONTENT; the connection's API key and base URL never."""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import Span

from core import tracing
from llm.messages import ChatMessage, wire


def call_name(**kwargs: Any) -> str:
    return f"chat {_model(kwargs)}".strip()


def _model(kwargs: dict[str, Any]) -> str:
    provider = kwargs.get("provider")
    return kwargs.get("model") or (provider.default_chat_model if provider is not None else "")


def _provider_name(kwargs: dict[str, Any]) -> str | None:
    provider, connection = kwargs.get("provider"), kwargs.get("connection")
    if connection is not None:
        return connection.kind
    return provider.kind if provider is not None else None


def call_attributes(**kwargs: Any) -> dict[str, Any]:
    messages = kwargs.get("messages") or ()
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": _provider_name(kwargs),
        "gen_ai.request.model": _model(kwargs) or None,
        "gen_ai.request.temperature": kwargs.get("temperature"),
        "gen_ai.request.max_tokens": kwargs.get("max_tokens"),
        "gen_ai.request.stream": True,
        "agentplat.llm.purpose": str(kwargs.get("purpose") or "chat"),
        "agentplat.llm.tools_offered": len(kwargs.get("tools") or ()),
        "gen_ai.input.messages": tracing.text(wire(messages)) if tracing.capture_content() else None,
    }


def call_event(span: Span, event: Any) -> bool:
    """The call's outcome, from its last event (llm.client.Finished, the one event with a finish reason: this module
    sits below llm.client, which imports it); True there, the call's span ends."""
    if getattr(event, "finish_reason", None) is None:
        return False
    output = _reply(event) if tracing.capture_content() else None
    tracing.set_attributes(
        span,
        {
            "gen_ai.response.model": event.model or None,
            "gen_ai.response.finish_reasons": [event.finish_reason],
            "gen_ai.usage.input_tokens": event.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": event.usage.completion_tokens,
            "agentplat.llm.usage_source": str(event.usage.source),
            "gen_ai.response.time_to_first_chunk": event.ttft_ms / 1000 if event.ttft_ms is not None else None,
            "agentplat.llm.ttft_ms": event.ttft_ms,
            "agentplat.llm.duration_ms": event.duration_ms,
            "agentplat.llm.tool_calls": len(event.tool_calls),
            "gen_ai.output.messages": tracing.text(output),
        },
    )
    return True


def _reply(event: Any) -> list[dict[str, Any]]:
    """The reply in the request's wire form (only made when content capture is on)."""
    calls = [call.as_message_part() for call in event.tool_calls] if event.tool_calls else None
    return wire([ChatMessage.assistant(event.text, tool_calls=calls)])

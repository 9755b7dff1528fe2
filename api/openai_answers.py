"""The answers of the OpenAI-compatible endpoint in OpenAI's shapes: a chat.completion, or its chat.completion.chunk
events (text deltas, then the client's tool calls as OpenAI streams them: each call's index, id and name first,
then its arguments in pieces), ending with [DONE]."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.http import HttpResponse, JsonResponse, StreamingHttpResponse

from agents import frames
from agents.runtime import TurnResult, TurnStatus
from agents.sinks import QueueSink
from api.openai_request import ApiError, CompletionRequest
from engine import turns
from llm import errors
from llm.messages import ChatMessage

ARGUMENT_PIECE_CHARS = 40  # a tool call's arguments streamed in pieces of this size, as a model writes them
ERROR_STATUS = {errors.QUOTA_EXCEEDED: 429, errors.RATE_LIMITED: 429, errors.PROVIDER_TIMEOUT: 504}


@dataclass(frozen=True)
class Ending:
    """How a reply ends: its text, the client's tool calls and OpenAI's finish_reason."""

    content: str
    tool_calls: Sequence[Mapping[str, Any]] = ()
    finish_reason: str = "stop"

    @classmethod
    def of(cls, result: TurnResult) -> Ending:
        reason = "tool_calls" if result.tool_calls else (result.finish_reason or "stop")
        return cls(result.message.content, result.tool_calls, reason)


def usage_of(result: TurnResult | None) -> dict[str, int]:
    prompt = result.usage.prompt_tokens if result else 0
    completion = result.usage.completion_tokens if result else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def turn_error(result: TurnResult | None) -> ApiError:
    code = (result.error_code if result else "") or errors.PROVIDER_ERROR
    kind = "insufficient_quota" if code == errors.QUOTA_EXCEEDED else "api_error"
    return ApiError(ERROR_STATUS.get(code, 502), errors.message_for(code), code=code, kind=kind)


def _progress(frame: frames.Frame) -> dict[str, Any] | None:
    """Tool, step and plan frames as the `agentplat` extra field of an empty chunk (ignored by standard clients)."""
    if isinstance(frame, frames.Tool | frames.Step | frames.Plan):
        return frame.as_dict()
    if isinstance(frame, frames.Delta) and frame.index != 0:
        return frame.as_dict()
    return None


def answer(
    common: dict[str, Any], completion_id: str, ending: Ending, result: TurnResult | None, headers: dict[str, str],
    ask: CompletionRequest,
) -> HttpResponse:  # fmt: skip
    """The non-streamed answer (a resent idempotency key gets the stored reply, streamed or not)."""
    if ask.stream:
        chunks = _chunks_for_ending(Chunks(common, completion_id, ask.include_usage), ending, result, ask)
        return StreamingHttpResponse(chunks, content_type="text/event-stream", headers=headers)
    message = ChatMessage.assistant(ending.content, tool_calls=ending.tool_calls or None).as_dict()
    body = {
        "id": completion_id,
        "object": "chat.completion",
        **common,
        "choices": [{"index": 0, "message": message, "finish_reason": ending.finish_reason, "logprobs": None}],
        "usage": usage_of(result),
    }
    if result is not None and result.status != TurnStatus.COMPLETED:
        body["agentplat"] = {"status": str(result.status)}
    return JsonResponse(body, headers=headers, json_dumps_params={"ensure_ascii": False})


def _sse(data: dict[str, Any] | str) -> str:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n"


class Chunks:
    """Builds the chunks of one streamed answer."""

    def __init__(self, common: dict[str, Any], completion_id: str, include_usage: bool) -> None:
        self.common = common
        self.completion_id = completion_id
        self.include_usage = include_usage

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> str:
        data = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            **self.common,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
            **extra,
        }
        if self.include_usage:
            data["usage"] = None
        return _sse(data)

    def tool_calls(self, calls: Sequence[Mapping[str, Any]]) -> list[str]:
        """The calls as OpenAI streams them: per call a head (index, id, type, name), then its arguments."""
        events = []
        for index, call in enumerate(calls):
            function = call["function"]
            head = {"index": index, "id": call["id"], "type": "function",
                    "function": {"name": function["name"], "arguments": ""}}  # fmt: skip
            events.append(self.chunk({"tool_calls": [head]}))
            arguments = function.get("arguments") or ""
            for start in range(0, len(arguments), ARGUMENT_PIECE_CHARS):
                piece = arguments[start : start + ARGUMENT_PIECE_CHARS]
                events.append(self.chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        return events

    def usage(self, result: TurnResult | None) -> str:
        return _sse(
            {"id": self.completion_id, "object": "chat.completion.chunk", **self.common, "choices": [],
             "usage": usage_of(result)}
        )  # fmt: skip

    def end(self, ending: Ending, result: TurnResult | None, include_usage: bool) -> list[str]:
        """The last events: the tool calls, the finish_reason, the usage when asked for, [DONE]."""
        events = self.tool_calls(ending.tool_calls)
        extra = {}
        if result is not None and result.status != TurnStatus.COMPLETED:
            extra = {"agentplat": {"status": str(result.status)}}
        events.append(self.chunk({}, ending.finish_reason, **extra))
        if include_usage:
            events.append(self.usage(result))
        return [*events, _sse("[DONE]")]


async def _chunks_for_ending(
    chunks: Chunks, ending: Ending, result: TurnResult | None, ask: CompletionRequest
) -> AsyncIterator[str]:
    yield chunks.chunk(ChatMessage.assistant("").as_dict())
    if ending.content:
        yield chunks.chunk({"content": ending.content})
    for event in chunks.end(ending, result, ask.include_usage):
        yield event


async def stream(
    task: asyncio.Task, sink: QueueSink, chunks: Chunks, ask: CompletionRequest, conversation_id: int
) -> AsyncIterator[str]:
    """The turn's frames as chat.completion.chunk events, ending with [DONE]; a client that goes away stops the
    turn (the partial reply is stored)."""
    sent: list[str] = []
    try:
        yield chunks.chunk(ChatMessage.assistant("").as_dict())
        while True:
            frame = await sink.queue.get()
            if frame is None:
                break
            if isinstance(frame, frames.Delta) and frame.index == 0:
                sent.append(frame.content)
                yield chunks.chunk({"content": frame.content})
            elif (progress := _progress(frame)) is not None:
                yield chunks.chunk({}, agentplat=progress)
        result = task.result()
        if result is None or result.status == TurnStatus.FAILED:
            yield _sse(turn_error(result).body())
            yield _sse("[DONE]")
            return
        written, stored = "".join(sent), result.message.content
        if stored != written:  # a runner that said its answer at once, or replaced what it streamed
            rest = stored[len(written) :] if stored.startswith(written) else stored
            if rest:
                yield chunks.chunk({"content": rest})
        for event in chunks.end(Ending.of(result), result, ask.include_usage):
            yield event
    except (asyncio.CancelledError, GeneratorExit):
        if not task.done():
            asyncio.get_running_loop().create_task(turns.request_stop(conversation_id=conversation_id))
        raise

"""The tool loop (seed 0, A4/A5): the turn runner of chat and ReAct agents.

The model is offered exactly the agent's tools. When it answers with tool calls, the platform checks and runs them:
a call to a tool the agent is not configured with is refused, invalid arguments go back to the model as that call's
result (so it can repair), valid calls run concurrently, each with a timeout, with the turn's tool context. The
assistant message with its `tool_calls` and the `tool` messages are stored together, then the model is called
again with the results, up to AGENT_MAX_TOOL_ITERATIONS rounds. A tool that asks the user ends the turn with the
question as the reply. Models without function calling use seed 1's text protocol (agents.textprotocol) with the
same tools, checks and storage.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings
from django.utils.translation import gettext

from agents import textprotocol
from agents.runtime import Sink, TurnSetup, _failed, _no_provider, turn_setup
from agents.tools import Tool, ToolCallContext, ToolError, ToolResult
from llm import errors
from llm.client import Finished, TextDelta, ToolCall, ToolCallStarted, database_sync_to_async, stream_chat
from llm.errors import LLMError
from memory.models import Conversation, Message, MessageStatus
from memory.services import assistant_message_finish, tool_exchange_add

logger = logging.getLogger("agents.toolloop")

SUMMARY_CHARS = 200


def max_iterations() -> int:
    return int(getattr(settings, "AGENT_MAX_TOOL_ITERATIONS", 6))


def tool_timeout() -> float:
    return float(getattr(settings, "AGENT_TOOL_TIMEOUT", 30))


@dataclass
class Outcome:
    """What became of one tool call: the text the model gets, and what the tool returned when it ran."""

    call: ToolCall
    status: str  # completed / failed
    text: str
    result: ToolResult | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


def _summary(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _chunks(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


async def run_tool_loop(
    *,
    conversation: Conversation,
    user_message: Message,
    sink: Sink,
    stop: asyncio.Event | None = None,
    index: int = 0,
) -> Message:
    """Run one turn of a chat / ReAct agent (the keywords of agents.runtime.run_turn)."""
    return await _Loop(conversation, user_message, sink, stop, index).run()


class _Loop:
    def __init__(
        self, conversation: Conversation, user_message: Message, sink: Sink, stop: asyncio.Event | None, index: int
    ) -> None:
        self.conversation = conversation
        self.user_message = user_message
        self.sink = sink
        self.stop = stop
        self.index = index
        self.parts: list[str] = []
        self.setup: TurnSetup | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.last_call_id: int | None = None
        self.tool_context: dict[str, Any] = {}

    async def run(self) -> Message:
        try:
            return await self._loop()
        except LLMError as exc:
            return await self._fail(exc.partial_text or "".join(self.parts), exc.code)
        except asyncio.CancelledError:
            await asyncio.shield(self._fail("".join(self.parts), errors.CANCELLED, emit=False))
            raise
        except Exception:
            logger.exception("turn failed conversation=%s", self.conversation.pk)
            return await self._fail("".join(self.parts), errors.PROVIDER_ERROR)

    async def _fail(self, text: str, code: str, emit: bool = True) -> Message:
        return await _failed(
            self.conversation, self.user_message, self.sink, self.index, text, code, setup=self.setup, emit=emit
        )

    async def _loop(self) -> Message:
        setup = self.setup = await database_sync_to_async(turn_setup)(conversation=self.conversation)
        if setup.provider is None:
            raise _no_provider()
        self.tool_context = dict(setup.tool_context)
        messages = list(setup.messages)
        text_mode = setup.text_protocol
        schemas = [tool.openai_schema(setup.language) for tool in setup.tools] if not text_mode else None
        rounds = repairs = 0
        while True:
            if self.stop is not None and self.stop.is_set():
                raise LLMError(errors.CANCELLED)
            finished = await self._call(messages, schemas, stream_text=not text_mode)
            if text_mode:
                parsed = textprotocol.parse_reply(finished.text)
                if parsed.repair_prompt:
                    if repairs >= textprotocol.REPAIR_LIMIT:
                        return await self._answer(
                            gettext("The model did not follow the reply protocol; please try again.")
                        )
                    repairs += 1
                    messages += [
                        {"role": "assistant", "content": finished.text},
                        textprotocol.sys_message(parsed.repair_prompt),
                    ]
                    continue
                if parsed.kind == "user":
                    return await self._answer(parsed.text)
                calls: tuple[ToolCall, ...] = (
                    ToolCall(id=f"call_txt_{uuid.uuid4().hex[:20]}", name=parsed.app, arguments=parsed.raw_arguments),
                )
                repairs = 0
            else:
                # Some servers leave ids out; the stored pairs need them.
                calls = tuple(
                    call if call.id else replace(call, id=f"call_{uuid.uuid4().hex[:20]}")
                    for call in finished.tool_calls
                )
                if not calls:
                    return await self._finish(finished.text)
            if rounds >= max_iterations():
                return await self._answer(
                    gettext(
                        "I stopped after %(count)s rounds of tool calls without reaching an answer. "
                        "Please rephrase or narrow the request."
                    )
                    % {"count": rounds}
                )
            rounds += 1
            if text_mode:
                for call in calls:
                    await self._tool_frame(call, "started", call.parsed_arguments or {})
            outcomes = await self._run_calls(calls)
            for outcome in outcomes:
                if outcome.result is not None:
                    self.tool_context.update(outcome.result.context or {})
            parts = [call.as_message_part() for call in calls]
            await database_sync_to_async(tool_exchange_add)(
                conversation=self.conversation,
                content="" if text_mode else finished.text,
                tool_calls=parts,
                results=[(outcome.call.id, outcome.text) for outcome in outcomes],
                usage=self._usage(),
                tool_context=self.tool_context,
            )
            question = next((o.result.ask_user for o in outcomes if o.result is not None and o.result.ask_user), None)
            if question:
                return await self._answer(question)
            if text_mode:
                messages += textprotocol.to_text_messages([{"role": "assistant", "content": "", "tool_calls": parts}])
                messages.append(textprotocol.sys_message("\n".join(outcome.text for outcome in outcomes)))
            else:
                messages.append({"role": "assistant", "content": finished.text or None, "tool_calls": parts})
                messages += [{"role": "tool", "tool_call_id": o.call.id, "content": o.text} for o in outcomes]

    async def _call(self, messages: list[dict[str, Any]], schemas: list[dict] | None, *, stream_text: bool) -> Finished:
        """One model call; text streams as deltas when `stream_text` (the text protocol waits for the whole reply)."""
        assert self.setup is not None
        self.parts = []
        finished: Finished | None = None
        async for event in stream_chat(
            tenant=self.conversation.tenant,
            provider=self.setup.provider,
            model=self.setup.model,
            messages=messages,
            tools=schemas or None,
            temperature=self.setup.temperature,
            agent_id=self.conversation.agent_id,
            conversation_id=self.conversation.pk,
            cancel=self.stop,
        ):
            if isinstance(event, TextDelta):
                self.parts.append(event.text)
                if stream_text:
                    await self.sink.emit({"type": "delta", "index": self.index, "content": event.text})
            elif isinstance(event, ToolCallStarted):
                await self.sink.emit(
                    {"type": "tool", "index": self.index, "name": event.name, "call_id": event.id,
                     "status": "started", "arguments": {}}
                )  # fmt: skip
            elif isinstance(event, Finished):
                finished = event
        assert finished is not None  # stream_chat always ends with Finished or raises
        self.prompt_tokens += finished.usage.prompt_tokens
        self.completion_tokens += finished.usage.completion_tokens
        self.last_call_id = await finished.recorded()
        return finished

    def _usage(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "llm_call_id": self.last_call_id,
        }

    async def _tool_frame(self, call: ToolCall, status: str, arguments: dict[str, Any], result: str = "") -> None:
        frame = {
            "type": "tool",
            "index": self.index,
            "name": call.name,
            "call_id": call.id,
            "status": status,
            "arguments": arguments,
        }
        if status != "started":
            frame["result"] = _summary(result)
        await self.sink.emit(frame)

    async def _run_calls(self, calls: tuple[ToolCall, ...]) -> list[Outcome]:
        """Check every call, run the valid ones concurrently; results in the order of the calls."""
        assert self.setup is not None
        allowed: dict[str, Tool] = {tool.name: tool for tool in self.setup.tools}
        context = dict(self.tool_context)
        jobs = []
        for call in calls:
            jobs.append(self._check_and_run(call, allowed.get(call.name), context))
        return list(await asyncio.gather(*jobs))

    async def _check_and_run(self, call: ToolCall, tool: Tool | None, context: dict[str, Any]) -> Outcome:
        arguments = call.parsed_arguments
        if tool is None:
            outcome = Outcome(call, "failed", f"Error: tool {call.name} is not available to this agent.")
        elif arguments is None:
            problem = call.arguments_error or f"The arguments of {call.name} must be a JSON object."
            outcome = Outcome(call, "failed", f"Error: invalid arguments for {call.name}: {problem}")
        elif problems := tool.validation_errors(arguments):
            outcome = Outcome(
                call, "failed", f"Error: invalid arguments for {call.name}: " + "; ".join(problems), arguments=arguments
            )
        else:
            outcome = await self._run_one(call, tool, arguments, context)
        await self._tool_frame(call, outcome.status, outcome.arguments or arguments or {}, outcome.text)
        return outcome

    async def _run_one(self, call: ToolCall, tool: Tool, arguments: dict[str, Any], context: dict[str, Any]) -> Outcome:
        conversation = self.conversation
        call_context = ToolCallContext(
            tenant=conversation.tenant,
            user_id=conversation.user_id,
            agent_id=conversation.agent_id,
            conversation_id=conversation.pk,
            context=dict(context),
        )
        timeout = tool_timeout()
        try:
            result = await asyncio.wait_for(tool.run(arguments, call_context), timeout)
        except ToolError as exc:
            return Outcome(call, "failed", f"Error: {exc}", arguments=arguments)
        except TimeoutError:
            return Outcome(call, "failed", f"Error: {call.name} did not answer within {timeout:g} seconds.",
                           arguments=arguments)  # fmt: skip
        except Exception:
            logger.exception("tool %s failed conversation=%s", call.name, conversation.pk)
            return Outcome(call, "failed", f"Error: {call.name} failed.", arguments=arguments)
        if not isinstance(result, ToolResult):
            result = ToolResult(content=result)
        return Outcome(call, "completed", result.content_text(), result=result, arguments=arguments)

    async def _answer(self, text: str) -> Message:
        """A reply the platform writes (or the text protocol's to_user part): streamed as deltas, then stored."""
        for piece in _chunks(text):
            await self.sink.emit({"type": "delta", "index": self.index, "content": piece})
        return await self._finish(text)

    async def _finish(self, text: str) -> Message:
        assert self.setup is not None
        usage = self._usage()
        message = await database_sync_to_async(assistant_message_finish)(
            conversation=self.conversation, content=text, usage=usage
        )
        await self.sink.emit(
            {
                "type": "step",
                "index": self.index,
                "status": "completed",
                "agentChatResponse": {"content": text, "intent": "chat", "data": {}},
            }
        )
        await self.sink.emit(
            {
                "type": "done",
                "index": self.index,
                "message_id": message.pk,
                "status": MessageStatus.COMPLETE,
                "usage": {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"]},
                "content": text,
                "strategy": self.setup.strategy,
            }
        )
        return message

"""The tool loop (seed 0, A4/A5): the turn runner of chat and ReAct agents.

The model is offered exactly the agent's tools. When it answers with tool calls, the platform checks and runs them
through `agents.tools.invoke.invoke_tool` (allowed tool, schema, timeout), concurrently, with the turn's tool
context. The assistant message with its `tool_calls` and the `tool` messages are stored together, then the model
is called again with the results, up to AGENT_MAX_TOOL_ITERATIONS rounds. A tool that asks the user ends the turn
`interrupted` with the question as the reply. Models without function calling use seed 1's text protocol
(agents.textprotocol) with the same tools, checks and storage.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext

from agents import frames, textprotocol
from agents.config import AgentConfig
from agents.models import MemoryExtraction
from agents.replyjson import ReplyField, reply_of
from agents.runtime import TurnContext, TurnResult, TurnRunner, TurnStatus, register_runner
from agents.tools import Tool, ToolCallContext, tools_for
from agents.tools.invoke import ToolOutcome, ToolRound, invoke_tool, merge_tool_context, tool_round, with_call_ids
from core.conf import setting
from core.db import database_sync_to_async
from llm import errors
from llm.client import Finished, TextDelta, ToolCall, ToolCallStarted
from llm.errors import LLMError
from llm.messages import ChatMessage
from llm.options import ChatRequest
from memory.longterm.events import COMBINED_PROMPT
from memory.models import Conversation, ConversationContext
from memory.services import context_build, tool_exchange_add

SUMMARY_CHARS = 200
# Sent (not stored) when a reply asked to be JSON is not: the model gets one more try.
REPAIR_PROMPT = (
    "Your reply does not follow the required response format: %(problem)s "
    "Answer again with only the JSON, nothing before or after it."
)


def max_iterations() -> int:
    return int(setting("AGENT_MAX_TOOL_ITERATIONS"))


@dataclass(frozen=True)
class LoopSetup:
    """The model request of a turn, read in one database hop before the model is called."""

    messages: list[ChatMessage]
    strategy: dict[str, Any]
    tools: list[Tool] = field(default_factory=list)
    text_protocol: bool = False
    # Seed 2's combined answer: the model answers {"user_reply", "new_events", ...}; only the reply is shown.
    combined: bool = False


def loop_setup(
    *,
    conversation: Conversation,
    config: AgentConfig,
    recalled: Sequence[str] = (),
    context: ConversationContext | None = None,
) -> LoopSetup:
    """The agent's tools and the context (one system message first) of the next turn; `context`, when given, is the
    conversation's context row read earlier in this turn (not read again).

    For a model whose provider entry says `function_calling: false`, the tools are offered through seed 1's text
    protocol: its prompt becomes the system prompt and the history is written in the protocol's text.
    """
    tools = tools_for(config.tool_names, tenant=conversation.tenant)
    provider = config.provider
    text_protocol = bool(tools) and provider is not None and not provider.supports_function_calling(config.model)
    prompt = config.system_prompt
    if text_protocol:
        prompt = textprotocol.system_prompt(role=prompt, tools=tools, language=config.language)
    # The text protocol already fixes the form of the answer: there the events are extracted by a separate call.
    combined = config.long_term_memory and config.memory_extraction == MemoryExtraction.COMBINED and not text_protocol
    if combined:
        prompt = f"{prompt}\n\n{COMBINED_PROMPT}" if prompt.strip() else COMBINED_PROMPT
    built = context_build(
        conversation=conversation, system_prompt=prompt, model=config.model, recalled=recalled, context=context
    )
    window = built.window
    strategy = {
        "name": conversation.context.strategy,
        "triggered": window.triggered,
        "tokens_saved": window.tokens_saved,
        "summarized": bool(window.summarize_ids),
    }
    messages = textprotocol.to_text_messages(built.messages) if text_protocol else built.messages
    return LoopSetup(messages=messages, strategy=strategy, tools=tools, text_protocol=text_protocol, combined=combined)


def no_provider() -> LLMError:
    return LLMError(
        errors.BAD_REQUEST, gettext("This tenant has no model provider: add one in Admin › Models › Model providers.")
    )


def _summary(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


class ToolLoopRunner(TurnRunner):
    kinds = ("chat", "react")

    def prepare(self, turn: TurnContext) -> LoopSetup | None:
        if turn.config.provider is None:
            return None
        return loop_setup(
            conversation=turn.conversation,
            config=turn.config,
            recalled=turn.recalled.lines,
            context=turn.stored_context,
        )

    async def run(self, turn: TurnContext) -> TurnResult:
        if turn.config.provider is None:
            raise no_provider()
        setup = turn.prepared()  # read in the turn's setup hop (run_turn)
        turn.stored_context = None  # read once: a later round or runner reads the row afresh
        turn.strategy = setup.strategy
        return await _Loop(turn, setup).run()


class _Loop:
    def __init__(self, turn: TurnContext, setup: LoopSetup) -> None:
        self.turn = turn
        self.setup = setup
        self.allowed: dict[str, Tool] = {tool.name: tool for tool in setup.tools}
        self.reply_field: ReplyField | None = None
        options = turn.options
        # An API client's own tools (llm.options): offered beside the agent's, whose names win; never run here.
        self.client_tools = (options.tool_names - set(self.allowed)) if options and not setup.text_protocol else set()
        self.wants_json = bool(options and options.wants_json)
        self.repairs = 0  # the text protocol's repair requests in a row
        self.calls_made = 0

    def _schemas(self) -> list[dict]:
        schemas = [tool.openai_schema(self.turn.config.language) for tool in self.setup.tools]
        if self.client_tools and self.turn.options is not None:
            schemas += [dict(tool) for tool in self.turn.options.tools if tool["function"]["name"] in self.client_tools]
        return schemas

    async def run(self) -> TurnResult:
        turn, setup = self.turn, self.setup
        messages = list(setup.messages)
        text_mode = setup.text_protocol
        schemas = self._schemas() if not text_mode else None
        rounds = 0
        while True:
            if turn.stopped:
                raise LLMError(errors.CANCELLED)
            finished = await self._call(messages, schemas, stream_text=not text_mode and not self.wants_json)
            if text_mode:
                step = await self._text_step(finished, messages)
                if step is None:
                    continue
                if isinstance(step, TurnResult):
                    return step
                calls = step
            else:
                calls = with_call_ids(finished.tool_calls)
                if not calls:
                    return await self._final(finished, messages, schemas)
                if any(call.name in self.client_tools for call in calls):
                    return await self._hand_back(finished, calls)
            if rounds >= max_iterations():
                return await self._answer(
                    gettext(
                        "I stopped after %(count)s rounds of tool calls without reaching an answer. "
                        "Please rephrase or narrow the request."
                    )
                    % {"count": rounds}
                )
            rounds += 1
            done = await self._round(finished, calls)
            question = next((outcome.ask_user for outcome in done.outcomes if outcome.ask_user), None)
            if question:
                return await self._answer(question, status=TurnStatus.INTERRUPTED)
            messages += self._round_messages(calls, done)

    async def _text_step(
        self, finished: Finished, messages: list[ChatMessage]
    ) -> TurnResult | tuple[ToolCall, ...] | None:
        """A reply in the text protocol: the answer (the turn's result), the call it makes, or None when the model
        was asked to repair its reply (`messages` grow by the exchange)."""
        parsed = textprotocol.parse_reply(finished.text)
        if parsed.repair_prompt:
            if self.repairs >= textprotocol.REPAIR_LIMIT:
                return await self._answer(gettext("The model did not follow the reply protocol; please try again."))
            self.repairs += 1
            messages += [ChatMessage.assistant(finished.text), textprotocol.sys_message(parsed.repair_prompt)]
            return None
        if parsed.kind == "user":
            return await self._answer(parsed.text)
        self.repairs = 0
        return (ToolCall(id=f"call_txt_{uuid.uuid4().hex[:20]}", name=parsed.app, arguments=parsed.raw_arguments),)

    async def _round(self, finished: Finished, calls: tuple[ToolCall, ...]) -> ToolRound:
        """Run a round of the agent's tool calls (every call at once, each with the tool context as it was before
        the round) and store it."""
        text_mode = self.setup.text_protocol
        if text_mode:
            for call in calls:
                await self._tool_frame(call, frames.ToolStatus.STARTED, call.parsed_arguments or {})
        done = await tool_round(finished.text, calls, self._run_one, concurrently=True)
        await self._store_round("" if text_mode else finished.text, calls, done)
        return done

    def _round_messages(self, calls: tuple[ToolCall, ...], done: ToolRound) -> list[ChatMessage]:
        """The round as the next model call reads it."""
        if not self.setup.text_protocol:
            return done.messages
        parts = [call.as_message_part() for call in calls]
        return [
            *textprotocol.to_text_messages([ChatMessage.assistant("", tool_calls=parts)]),
            textprotocol.sys_message("\n".join(outcome.text for outcome in done.outcomes)),
        ]

    async def _store_round(self, text: str, calls: Sequence[ToolCall], done: ToolRound) -> None:
        """Keep the round's tool context and store its assistant message and tool results together."""
        turn = self.turn
        turn.tool_context = merge_tool_context(turn.tool_context, done.outcomes)
        await database_sync_to_async(tool_exchange_add)(
            conversation=turn.conversation,
            content=text,
            tool_calls=[call.as_message_part() for call in calls],
            results=[(call.id, outcome.text) for call, outcome in done.answered],
            usage=turn.usage.stored(),
            tool_context=turn.tool_context,
            failed={call.id for call, outcome in done.answered if not outcome.ok},
        )

    async def _hand_back(self, finished: Finished, calls: tuple[ToolCall, ...]) -> TurnResult:
        """End the turn with the calls of the API client's tools, for the client to run (its next request brings
        their results). The agent's own calls of the same reply run first, stored as a round of their own."""
        own = tuple(call for call in calls if call.name not in self.client_tools)
        if own:
            await self._store_round("", own, await tool_round("", own, self._run_one, concurrently=True))
        parts = tuple(call.as_message_part() for call in calls if call.name in self.client_tools)
        text = "" if own else finished.text
        return await self.turn.finish(text, tool_calls=parts, finish_reason="tool_calls")

    async def _final(self, finished: Finished, messages: list[ChatMessage], schemas: list[dict] | None) -> TurnResult:
        """The model's answer ends the turn (checked first when the API client asked for JSON)."""
        if self.reply_field is not None:
            return await self._combined_answer(finished.text)
        if self.wants_json and finished.finish_reason != "length":
            return await self._json_answer(finished, messages, schemas)
        if self.wants_json:  # cut by max_tokens (the client's or the agent's): said as it came, as OpenAI does
            await self.turn.say(finished.text)
        return await self.turn.finish(finished.text, finish_reason=finished.finish_reason or "stop")

    async def _json_answer(
        self, finished: Finished, messages: list[ChatMessage], schemas: list[dict] | None
    ) -> TurnResult:  # fmt: skip
        """A reply the client asked to be JSON (`response_format`): checked (and against its schema), asked again
        once with what was wrong, then said; a second failure fails the turn (code invalid_output)."""
        options = self.turn.options
        assert options is not None
        text, problem = finished.text, options.reply_problem(finished.text)
        if problem:
            again = [*messages, ChatMessage.assistant(text), ChatMessage.system(REPAIR_PROMPT % {"problem": problem})]
            finished = await self._call(again, schemas, stream_text=False)
            text = finished.text
            problem = options.reply_problem(text) if not finished.tool_calls else "the model called a tool"
        if problem:
            raise LLMError(errors.INVALID_OUTPUT, detail=problem)
        await self.turn.say(text)
        return await self.turn.finish(text, finish_reason=finished.finish_reason or "stop")

    async def _call(self, messages: list[ChatMessage], schemas: list[dict] | None, *, stream_text: bool) -> Finished:
        """One model call; text streams as deltas when `stream_text` (the text protocol waits for the whole reply)."""
        turn = self.turn
        turn.restart_text()
        self.reply_field = ReplyField() if self.setup.combined and stream_text else None
        finished: Finished | None = None
        async for event in turn.model.stream(self._request(messages, schemas)):
            if isinstance(event, TextDelta):
                if self.reply_field is not None:
                    shown = self.reply_field.feed(event.text)
                    if shown:
                        await turn.delta(shown)
                elif stream_text:
                    await turn.delta(event.text)
            elif isinstance(event, ToolCallStarted) and event.name not in self.client_tools:
                await turn.emit(
                    frames.Tool(index=turn.index, name=event.name, call_id=event.id, status=frames.ToolStatus.STARTED)
                )
            elif isinstance(event, Finished):
                finished = event
        assert finished is not None  # stream_chat always ends with Finished or raises
        turn.count(finished.usage.prompt_tokens, finished.usage.completion_tokens, await finished.recorded())
        return finished

    def _request(self, messages: list[ChatMessage], schemas: list[dict] | None) -> ChatRequest:
        """The next model call's request: the messages and tools, with what the API client asked (llm.options); the
        turn's seam adds the agent's temperature and longest reply."""
        options = self.turn.options
        tool_choice = options.tool_choice if options and (self.client_tools or self.setup.tools) else None
        if self.calls_made and tool_choice not in (None, "none"):
            tool_choice = "auto"  # a forced call is the turn's first; after the agent's tools ran, the model answers
        self.calls_made += 1
        return ChatRequest.asking(options, messages=messages, tools=schemas or (), tool_choice=tool_choice)

    async def _combined_answer(self, answer: str) -> TurnResult:
        """The end of a combined answer: the reply is its `user_reply` (what was not streamed yet is sent now), the
        whole answer goes to the extraction after the turn."""
        turn, field = self.turn, self.reply_field
        assert field is not None
        rest = field.close()
        if rest:
            await turn.delta(rest)
        reply = reply_of(answer, field)
        shown = turn.text
        if reply != shown:
            await turn.say(reply[len(shown) :] if reply.startswith(shown) else reply)
        turn.memory_answer = answer
        return await turn.finish(reply)

    async def _tool_frame(self, call: ToolCall, status: str, arguments: dict[str, Any], result: str = "") -> None:
        summary = None if status == frames.ToolStatus.STARTED else _summary(result)
        await self.turn.emit(
            frames.Tool(index=self.turn.index, name=call.name, call_id=call.id, status=status, arguments=arguments,
                        result=summary)
        )  # fmt: skip

    async def _run_one(self, call: ToolCall) -> ToolOutcome:
        turn = self.turn
        call_context = ToolCallContext(
            tenant=turn.tenant,
            user_id=turn.user_id,
            agent_id=turn.conversation.agent_id,
            conversation_id=turn.conversation.pk,
            context=dict(turn.tool_context),  # a copy: the round's contexts join after it (merge_tool_context)
            knowledge_base_ids=turn.config.knowledge_base_ids,
        )
        outcome = await invoke_tool(
            self.allowed.get(call.name),
            name=call.name,
            arguments=call.parsed_arguments,
            call=call_context,
            arguments_error=call.arguments_error or None,
        )
        await self._tool_frame(call, outcome.status, outcome.arguments or call.parsed_arguments or {}, outcome.text)
        return outcome

    async def _answer(self, text: str, *, status: TurnStatus = TurnStatus.COMPLETED) -> TurnResult:
        """A reply the platform writes (or the text protocol's to_user part): streamed as deltas, then stored."""
        await self.turn.say(text)
        return await self.turn.finish(text, status=status)


register_runner(ToolLoopRunner())

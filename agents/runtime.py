"""The turn contract: one turn, from a stored user message to a stored reply, whatever the agent's kind.

`run_turn` reads the agent's configuration and the turn's tool context (one database hop), builds a `TurnContext`
and hands it to the `TurnRunner` registered for the agent's kind (chat and ReAct agents: agents.toolloop; workflow
agents: agents.workflows.agent_kind; planners: plans.planner). A runner writes typed frames (agents.frames) to the
context's sink and returns a `TurnResult`. The base class turns every failure into the same ending: the user's
message stays stored, what arrived is stored with the error code, and one error frame ends the turn; a set stop
signal ends it `stopped`.

The sink is the surface's business (the chat websocket logs and broadcasts frames, an API collects them); the
runtime never imports a surface.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from django.db import OperationalError

from agents import frames, traces
from agents.config import AgentConfig, conversation_config
from agents.modelcall import AgentModel, bound
from agents.models import AgentKind
from core import tracing
from core.db import database_sync_to_async
from core.registry import Registry
from llm import errors
from llm.client import ChatResult, Event, Finished
from llm.errors import LLMError
from llm.options import CallOptions, ChatRequest
from memory.longterm.recall import Recalled, recall_for_turn
from memory.models import Conversation, ConversationContext, Message, MessageStatus
from memory.services import after_turn, assistant_message_finish

if TYPE_CHECKING:
    from tenants.models import Tenant

logger = logging.getLogger("agents.runtime")

# Platform-written text (a question, a workflow's output) goes out in pieces of this many characters, as a model's
# reply would.
SAY_CHUNK_CHARS = 16
# The finish_reason of a reply the longest reply (max_tokens) cut, as OpenAI names it.
LENGTH = "length"


class Sink(Protocol):
    """Where a turn writes its frames. `emit` returns the frame as delivered (with its `seq` when the sink numbers)."""

    async def emit(self, frame: frames.Frame) -> frames.Logged: ...


class TurnStatus(StrEnum):
    COMPLETED = "completed"
    # The agent asked the user (a tool, a workflow step, a plan step): the next message answers.
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True)
class Usage:
    """Tokens the turn's model calls used (provider-reported where given), and the last call's record id."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_call_id: int | None = None

    def plus(self, prompt_tokens: int, completion_tokens: int, llm_call_id: int | None = None) -> Usage:
        return Usage(
            self.prompt_tokens + prompt_tokens,
            self.completion_tokens + completion_tokens,
            llm_call_id if llm_call_id is not None else self.llm_call_id,
        )

    def __add__(self, other: Usage) -> Usage:
        return self.plus(other.prompt_tokens, other.completion_tokens, other.llm_call_id)

    def frame(self) -> dict[str, int]:
        return frames.usage_dict(self.prompt_tokens, self.completion_tokens)

    def stored(self) -> dict[str, Any]:
        """As Message.usage keeps it."""
        return {**self.frame(), "llm_call_id": self.llm_call_id}


@dataclass(frozen=True)
class MeteredModel(AgentModel):
    """The turn's model as the tools it runs reach it (agents.modelcall.for_tool, as deep_think does): each of their
    calls is counted in the turn's usage by `meter`, so a turn's usage is every model call it made (the /v1 answer's
    usage, docs/api.md). The runner counts its own calls (with their record ids) itself."""

    meter: Callable[[int, int], None] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def counting(cls, model: AgentModel, meter: Callable[[int, int], None]) -> MeteredModel:
        values = {item.name: getattr(model, item.name) for item in dataclasses.fields(AgentModel)}
        return cls(**values, meter=meter)

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        async for event in super().stream(request):
            if isinstance(event, Finished) and self.meter is not None:
                self.meter(event.usage.prompt_tokens, event.usage.completion_tokens)
            yield event

    async def complete(self, request: ChatRequest) -> ChatResult:
        result = await super().complete(request)
        if self.meter is not None:
            self.meter(result.usage.prompt_tokens, result.usage.completion_tokens)
        return result


@dataclass(frozen=True)
class TurnResult:
    """How a turn ended: the stored reply, its status and the tokens it used. `data` is the agentChatResponse data
    (a workflow's run, a plan step's record) and `error_code` the llm.errors code of a failed or stopped turn."""

    message: Message
    status: TurnStatus
    usage: Usage = Usage()
    data: dict[str, Any] = field(default_factory=dict)
    error_code: str = ""
    # The calls of an API client's own tools that end the turn (the client runs them), in the OpenAI form.
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str = "stop"  # the model's: "length" when max_tokens cut the reply


@dataclass
class TurnContext:
    """One turn: where it runs, with what configuration, where its frames go, and the signal that stops it."""

    conversation: Conversation
    user_message: Message
    config: AgentConfig
    sink: Sink
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    # The conversation's tool context (A5) as the turn starts; runners keep it current with invoke_tool's merge.
    tool_context: dict[str, Any] = field(default_factory=dict)
    # The conversation's context row as the turn started (read once with the tool context): the runner that builds
    # the model request takes it instead of reading it again (memory.services.context_build's `context`).
    stored_context: ConversationContext | None = None
    index: int = 0
    # What the context's overflow strategy did this turn (the done frame reports it); set by runners that build one.
    strategy: dict[str, Any] | None = None
    # Long-term memory recalled for this turn (agents with long-term memory); runners that build a model request
    # put its lines in the system message, and the reply's step frame says what was used.
    recalled: Recalled = field(default_factory=Recalled)
    # The model's whole answer when the reply came with its events (seed 2's combined answer): extracted after.
    memory_answer: str | None = None
    # What an API client asked of the model for this turn (its tools, response format, sampling), if any.
    options: CallOptions | None = None
    usage: Usage = Usage()
    # Progress lines kept with the reply (a workflow agent's steps, agents.workflows.agent_kind): the chat shows
    # them again after a reload, as it does a tool loop's stored calls.
    lines: list[dict[str, Any]] = field(default_factory=list)
    _text: list[str] = field(default_factory=list)
    # What the runner's `prepare` gave (or raised) in the setup hop, until `prepared()` takes it.
    _prepared: Any = None
    _prepare_error: Exception | None = None

    @property
    def tenant(self) -> Tenant:
        return self.conversation.tenant

    @property
    def user_id(self) -> int:
        return self.conversation.user_id

    @property
    def stopped(self) -> bool:
        return self.stop.is_set()

    @property
    def model(self) -> AgentModel:
        """The turn's model calls (agents.modelcall): the agent's provider, model, temperature and longest reply, this
        conversation, and the turn's stop signal. Every model call of a turn goes through it."""
        return AgentModel.of(self.config, tenant=self.tenant, conversation_id=self.conversation.pk, cancel=self.stop)

    @property
    def text(self) -> str:
        """The reply text streamed so far (since the last `restart_text`)."""
        return "".join(self._text)

    def prepare_with(self, runner: TurnRunner) -> None:
        """Run `runner.prepare` (in the setup hop), keeping what it returns, or what it raises, for `prepared()`."""
        try:
            self._prepared = runner.prepare(self)
        except Exception as exc:  # raised again as the runner starts, where execute ends it like any failure
            self._prepare_error = exc

    def prepared(self) -> Any:
        """What the runner's `prepare` returned in the turn's setup hop (None when it was not run, and once taken)."""
        value, self._prepared = self._prepared, None
        return value

    def raise_unprepared(self) -> None:
        """Raise what the runner's `prepare` raised, if it did (`execute` ends that failure like any other)."""
        error, self._prepare_error = self._prepare_error, None
        if error is not None:
            raise error

    def restart_text(self) -> None:
        """A new model call begins: what the previous one wrote is no longer the reply in progress."""
        self._text = []

    def count(self, prompt_tokens: int, completion_tokens: int, llm_call_id: int | None = None) -> None:
        self.usage = self.usage.plus(prompt_tokens, completion_tokens, llm_call_id)

    async def emit(self, frame: frames.Frame) -> frames.Logged:
        return await self.sink.emit(frame)

    async def delta(self, text: str) -> None:
        """A piece of the reply."""
        self._text.append(text)
        await self.sink.emit(frames.Delta(index=self.index, content=text))

    async def say(self, text: str) -> None:
        """Text the platform writes as the reply (a question, a workflow's output), streamed in pieces."""
        for start in range(0, len(text), SAY_CHUNK_CHARS):
            await self.delta(text[start : start + SAY_CHUNK_CHARS])

    async def finish(
        self,
        text: str,
        *,
        status: TurnStatus = TurnStatus.COMPLETED,
        intent: str = "chat",
        data: dict[str, Any] | None = None,
        tool_calls: tuple[dict[str, Any], ...] = (),
        finish_reason: str = "stop",
    ) -> TurnResult:
        """Store `text` as the reply and end the turn: a step frame with the agentChatResponse, then done. With
        `tool_calls` (an API client's tools), the reply is stored with them, for the client to answer."""
        usage = self._stored_usage()
        if self.recalled.used:
            # What fed the reply, kept with it: the chat shows it after a reload too.
            usage["memories"] = [{"kind": item["kind"], "text": item["text"]} for item in self.recalled.used]
        cut = finish_reason == LENGTH
        if cut:
            usage["finish_reason"] = LENGTH  # the chat notes the cut reply after a reload too
        message = await database_sync_to_async(assistant_message_finish)(
            conversation=self.conversation, content=text, usage=usage, tool_calls=list(tool_calls) or None
        )
        data = data or {}
        if self.recalled.used and "memories" not in data:
            data = {**data, "memories": self.recalled.used}
        await self.sink.emit(
            frames.Step.response(index=self.index, status=str(status), content=text, intent=intent, data=data)
        )
        await self.sink.emit(
            frames.Done(index=self.index, message_id=message.pk, status=MessageStatus.COMPLETE,
                        usage=self.usage.frame(), content=text, strategy=self.strategy,
                        finish_reason=LENGTH if cut else None)
        )  # fmt: skip
        return TurnResult(message=message, status=status, usage=self.usage, data=data, tool_calls=tool_calls,
                          finish_reason=finish_reason)  # fmt: skip

    def _stored_usage(self) -> dict[str, Any]:
        """The reply's Message.usage: its tokens, and the progress lines kept with it."""
        usage = self.usage.stored()
        if self.lines:
            usage["steps"] = list(self.lines)
        return usage

    async def fail(self, code: str, text: str | None = None, *, emit: bool = True) -> TurnResult:
        """End the turn failed (or stopped, for `cancelled`): what arrived is stored with the code, a partial reply
        gets its done frame, then one error frame. The user's message stays stored either way."""
        text = self.text if text is None else text
        try:
            message = await self._stored_failed(text, code)
        except Exception:
            # The database is gone (every connection dropped): the page still learns how its turn ended.
            if emit:
                await self.sink.emit(
                    frames.Error(index=self.index, code=code, message=errors.message_for(code),
                                 user_message_id=self.user_message.pk)
                )  # fmt: skip
            raise
        status = TurnStatus.STOPPED if code == errors.CANCELLED else TurnStatus.FAILED
        result = TurnResult(message=message, status=status, usage=self.usage, error_code=code)
        if not emit:
            return result
        partial = message.status == MessageStatus.PARTIAL
        if partial:
            await self.sink.emit(
                frames.Done(index=self.index, message_id=message.pk, status=MessageStatus.PARTIAL,
                            usage=frames.usage_dict(), content=text, strategy=self.strategy)
            )  # fmt: skip
        await self.sink.emit(
            frames.Error(index=self.index, code=code, message=errors.message_for(code),
                         message_id=message.pk if partial else None, user_message_id=self.user_message.pk)
        )  # fmt: skip
        return result

    async def _stored_failed(self, text: str, code: str) -> Message:
        """The failed reply stored; once more on a fresh connection when the first was dropped (a pooled connection
        the database had closed fails at its first use: nothing of this write was done)."""
        store = database_sync_to_async(assistant_message_finish)
        arguments = {
            "conversation": self.conversation,
            "content": text,
            "error_code": code,
            "usage": self._stored_usage(),
        }
        try:
            return await store(**arguments)
        except OperationalError:
            logger.warning("storing a failed reply: the connection was dropped, once more conversation=%s",
                           self.conversation.pk, exc_info=True)  # fmt: skip
            return await store(**arguments)


class TurnRunner:
    """Answers the turns of one or more agent kinds. Subclasses implement `run`; `execute` is the one entry point,
    and gives every runner the same ending for model errors, unexpected failures, Stop and cancellation."""

    kinds: ClassVar[tuple[str, ...]] = ()

    def prepare(self, turn: TurnContext) -> Any:
        """The database reads of the runner's first step, run in the turn's setup hop with the agent's
        configuration and the recall instead of in a hop of their own (each hop waits for its turn on a busy
        process); `run` takes the result back with `turn.prepared()`. Sync: it runs on a database thread."""
        return None

    async def run(self, turn: TurnContext) -> TurnResult:
        """Answer `turn.user_message`: write frames through `turn` and end with `turn.finish(...)` (or raise
        LLMError, which becomes a failed turn with its code)."""
        raise NotImplementedError

    async def execute(self, turn: TurnContext) -> TurnResult:
        try:
            turn.raise_unprepared()
            if turn.stopped:
                raise LLMError(errors.CANCELLED)
            if refusals := turn.config.pack_refusals(turn.tenant):
                # A tool of a pack the tenant does not have: said as the reply, and nothing runs.
                text = " ".join(refusals)
                await turn.say(text)
                return await turn.finish(text, status=TurnStatus.FAILED)
            # The tools that call a model find the turn's (agents.modelcall.for_tool), and their calls count in
            # the turn's usage.
            with bound(MeteredModel.counting(turn.model, turn.count)):
                return await self.run(turn)
        except LLMError as exc:
            return await turn.fail(exc.code, exc.partial_text or turn.text)
        except asyncio.CancelledError:
            await asyncio.shield(turn.fail(errors.CANCELLED, emit=False))
            raise
        except Exception:
            logger.exception("turn failed conversation=%s kind=%s", turn.conversation.pk, turn.config.kind)
            return await turn.fail(errors.PROVIDER_ERROR)


_runners: Registry[TurnRunner] = Registry("the turn runners (agents.runtime), by agent kind")


def register_runner(runner: TurnRunner) -> TurnRunner:
    """Let `runner` answer the turns of agents of its kinds (called from an app's ready(), or at import)."""
    for kind in runner.kinds:
        _runners.register(kind, runner)
    return runner


def runner_for(kind: str) -> TurnRunner:
    """The runner of `kind`; an unknown kind (an old version's) is answered as a chat agent."""
    return _runners.find(kind) or _runners.get(AgentKind.CHAT)


def _turn_setup(conversation: Conversation, user_message: Message, **fields: Any) -> TurnContext:
    """The turn as its runner gets it, read in one database hop: the agent's configuration, the conversation's
    context row, the recalled memories and what the runner prepares (`fields`: TurnContext's others)."""
    config = conversation_config(conversation)
    conversation.tenant  # noqa: B018 - loaded here, so async runners read it without a query
    # Read afresh: conversation.context may be a cached instance from an earlier turn. One row at most (one to one):
    # no ordering to compile, as first() would add.
    stored_context = next(iter(ConversationContext.objects.filter(conversation=conversation)[:1]), None)
    tool_context = stored_context.tool_context if stored_context is not None else None
    turn = TurnContext(
        conversation=conversation,
        user_message=user_message,
        config=config,
        tool_context=tool_context if isinstance(tool_context, dict) else {},
        stored_context=stored_context,
        **fields,
    )
    if config.long_term_memory:
        turn.recalled = _recall(conversation, user_message, config, stored_context)
    turn.prepare_with(runner_for(config.kind))
    return turn


@tracing.traced(
    traces.turn_name, identity=traces.turn_identity, before=traces.turn_attributes, after=traces.turn_result
)
async def run_turn(
    *,
    conversation: Conversation,
    user_message: Message,
    sink: Sink,
    stop: asyncio.Event | None = None,
    index: int = 0,
    options: CallOptions | None = None,
) -> TurnResult:
    """Answer the stored `user_message` through the runner of the conversation's agent kind (`options`: what an
    API client asked of the model).

    Never raises for a failure of the model, a tool or the runner: the result says `failed` (or `stopped` when
    `stop` was set) and the sink got the error frame. Cancelling the task stores what arrived (code `cancelled`)
    and re-raises.
    """
    stop = stop if stop is not None else asyncio.Event()
    turn = await database_sync_to_async(_turn_setup)(
        conversation, user_message, sink=sink, stop=stop, index=index, options=options
    )
    config = turn.config
    tracing.annotate(traces.turn_config(config), name=f"invoke_agent {config.name}")
    result = await runner_for(config.kind).execute(turn)
    if config.long_term_memory and result.status in (TurnStatus.COMPLETED, TurnStatus.INTERRUPTED):
        # After the reply is stored and its done frame sent: extraction never delays the reply.
        await database_sync_to_async(after_turn)(
            conversation=conversation,
            user_message_id=user_message.pk,
            reply_message_id=result.message.pk,
            mode=config.memory_extraction,
            answer=turn.memory_answer,
        )
    return result


def _recall(
    conversation: Conversation, user_message: Message, config: AgentConfig, context: ConversationContext | None
) -> Recalled:
    """The turn's long-term memories; a failure of recall is logged and the turn goes on without them."""
    try:
        # The recall budget is a share of the window the model is held to: its provider's, or the overflow's cap.
        window = config.provider.context_window(config.model or None) if config.provider is not None else None
        window = min((w for w in (window, config.overflow.max_tokens) if w), default=None)
        return recall_for_turn(
            conversation, user_message.content, model=config.model or "gpt-4", window=window, context=context
        )
    except Exception:
        logger.exception("memory recall failed conversation=%s", conversation.pk)
        return Recalled()

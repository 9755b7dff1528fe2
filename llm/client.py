"""The model gateway: one async client for every provider.

`stream_chat(request, ...)` yields typed events (TextDelta, ToolCallStarted, ToolCallsReady, Finished) from a
streamed chat completion of one `llm.options.ChatRequest`; `complete_chat(request, ...)` collects them. Both check
the tenant's quota before anything is sent, retry 429 / 5xx / connection errors with backoff (only before the first
chunk), map every failure to an LLMError code, and record one LLMCall at the end, whatever the outcome. The hot
path does no database work between chunks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from core import tracing
from core.db import database_sync_to_async
from llm import errors, tokens, traces
from llm.errors import LLMError
from llm.messages import ChatMessage, wire
from llm.models import CallStatus, ModelProvider, Purpose, UsageSource
from llm.options import ChatRequest
from llm.quota import quota_check, quota_fits_cached, quota_ledger_add
from llm.selectors import connection_for
from llm.services import Usage, llm_call_record, scope_of, usage_counted
from llm.transports import Connection, transport_for
from tenants.models import Tenant

logger = logging.getLogger("llm.calls")


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the reply's text, in order."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """The model began a tool call (for progress frames); its arguments are still streaming."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call assembled from its deltas. `arguments` is the raw JSON text the model wrote."""

    id: str
    name: str
    arguments: str
    index: int = 0

    @property
    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments as a dict, or None when the model wrote invalid JSON (see arguments_error)."""
        try:
            value = json.loads(self.arguments) if self.arguments.strip() else {}
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    @property
    def arguments_error(self) -> str:
        """Why the arguments are unusable ("" when they parse), to send back to the model for a repair."""
        if not self.arguments.strip():
            return ""
        try:
            value = json.loads(self.arguments)
        except ValueError as exc:
            return f"Invalid JSON in the arguments of {self.name}: {exc}"
        return "" if isinstance(value, dict) else f"The arguments of {self.name} must be a JSON object."

    def as_message_part(self) -> dict[str, Any]:
        """The OpenAI form, for the assistant message that precedes the tool results."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class ToolCallsReady:
    """Every tool call of the reply, assembled, in index order (parallel calls included)."""

    tool_calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class Finished:
    """The end of a successful call."""

    finish_reason: str
    usage: Usage
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    ttft_ms: int | None = None
    duration_ms: int = 0
    model: str = ""
    recording: asyncio.Future[int] | None = field(default=None, repr=False, compare=False)

    async def recorded(self) -> int | None:
        """The id of this call's LLMCall row, once written (the write runs in the background)."""
        return await self.recording if self.recording is not None else None


Event = TextDelta | ToolCallStarted | ToolCallsReady | Finished


@dataclass
class ChatResult:
    """What complete_chat returns."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: Usage
    call_id: int | None
    ttft_ms: int | None
    duration_ms: int
    model: str


@dataclass
class _ToolCallBuilder:
    index: int
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)

    def build(self) -> ToolCall:
        return ToolCall(id=self.id, name=self.name, arguments="".join(self.parts), index=self.index)


def backoff_delay(attempt: int, retry_after: float | None = None) -> float:
    """Seconds to wait before retry number `attempt` (1-based): exponential with jitter, or the server's hint."""
    cap = settings.LLM_RETRY_MAX_DELAY
    if retry_after is not None and retry_after >= 0:
        return min(retry_after, cap)
    base = settings.LLM_RETRY_BASE_DELAY * (2 ** (attempt - 1))
    return min(cap, base * (0.5 + random.random() / 2))  # noqa: S311 (jitter, not security)


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


_pending_records: set[asyncio.Task] = set()


def _record_done(task: asyncio.Task) -> None:
    _pending_records.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.error("writing an LLMCall record failed: %r", task.exception())


def _record_later(record: Any, *args: Any) -> asyncio.Task:
    """Write a call record in a background task (it inherits the caller's tenant scope)."""
    task = asyncio.get_running_loop().create_task(database_sync_to_async(record)(*args))
    _pending_records.add(task)  # a strong reference until done: the event loop keeps only weak ones
    task.add_done_callback(_record_done)
    return task


@dataclass(frozen=True)
class _Request:
    """One chat completion: what is sent (`params`, with the wire `messages`) and what its LLMCall row names."""

    tenant: Tenant
    connection: Connection
    model: str
    messages: list[dict[str, Any]]
    tools: Sequence[Mapping[str, Any]] | None
    params: dict[str, Any]
    record_base: dict[str, Any]


def _chat_request(
    request: ChatRequest,
    *,
    tenant: Tenant,
    provider: ModelProvider | None,
    connection: Connection | None,
    model: str | None,
    purpose: str,
    agent_id: int | None,
    conversation_id: int | None,
) -> _Request:
    """What stream_chat sends for `request`, and what its call record names (see there)."""
    if connection is None:
        if provider is None:
            raise ValueError("stream_chat() needs a provider or a connection.")
        connection = connection_for(provider)
    model = model or (provider.default_chat_model if provider is not None else "")
    if not model:
        raise ValueError("stream_chat() needs a model (or a provider with a default chat model).")
    params: dict[str, Any] = {"model": model, **request.wire_params()}
    record_base = {
        "tenant": tenant,
        "provider_id": connection.provider_id,
        "model": model,
        "purpose": purpose,
        "agent_id": agent_id,
        "conversation_id": conversation_id,
    }
    return _Request(tenant, connection, model, params["messages"], request.tools or None, params, record_base)


async def _quota_checked(request: _Request) -> None:
    """Refuse (and record) a call the tenant's token budget cannot take; raises LLMError."""
    tenant, messages, tools = request.tenant, request.messages, request.tools

    def check_quota() -> None:
        with scope_of(tenant):
            try:
                quota_check(tenant=tenant, model=request.model, messages=messages, tools=tools)
            except LLMError as exc:
                llm_call_record(**request.record_base, status=CallStatus.REFUSED, error_code=exc.code, attempts=0)
                raise

    # Far from the budget, the in-process ledger answers without a database round trip.
    if not quota_fits_cached(tenant=tenant, messages=messages, tools=tools):
        await database_sync_to_async(check_quota)()


@dataclass
class _Call:
    """One call across its attempts: the reply so far, the retry loop, and the LLMCall row written at the end."""

    request: _Request
    started: float
    text_parts: list[str] = field(default_factory=list)
    builders: dict[int, _ToolCallBuilder] = field(default_factory=dict)
    finish_reason: str = ""
    usage_reported: Any = None
    ttft: float | None = None
    attempt: int = 0
    emitted: bool = False

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def final_usage(self) -> Usage:
        """The provider's usage when it reported one, else the tokens counted from the request and the reply."""
        if self.usage_reported is not None:
            reported = self.usage_reported
            return Usage(reported.prompt_tokens or 0, reported.completion_tokens or 0, UsageSource.PROVIDER)
        request = self.request
        tool_calls = [{"name": b.name, "arguments": "".join(b.parts)} for b in self.builders.values()]
        return usage_counted(
            model=request.model, messages=request.messages, tools=request.tools, text=self.text, tool_calls=tool_calls
        )

    def record(self, status: str, error_code: str = "", usage: Usage | None = None) -> int:
        """Write the call's LLMCall row (database thread); without `usage`, count it and add it to the ledger."""
        if usage is None:
            usage = self.final_usage()
            quota_ledger_add(tenant=self.request.tenant, tokens=usage.total_tokens)
        call = llm_call_record(
            **self.request.record_base,
            usage=usage,
            status=status,
            error_code=error_code,
            finish_reason=self.finish_reason,
            ttft_ms=_ms(self.ttft) if self.ttft is not None else None,
            duration_ms=_ms(time.perf_counter() - self.started),
            attempts=self.attempt,
        )
        return call.pk

    def _chunk_events(self, chunk: Any) -> Iterator[Event]:
        """Fold one streamed chunk into the reply, yielding its events as they come."""
        if chunk.usage is not None:
            self.usage_reported = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            if delta is not None:
                content = delta.content
                if content:
                    if self.ttft is None:
                        self.ttft = time.perf_counter() - self.started
                    self.text_parts.append(content)
                    self.emitted = True
                    yield TextDelta(content)
                for piece in delta.tool_calls or ():
                    started_call = _add_tool_call_piece(self.builders, piece)
                    if started_call is not None:
                        if self.ttft is None:
                            self.ttft = time.perf_counter() - self.started
                        self.emitted = True
                        yield started_call
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    async def attempts(self, cancel: asyncio.Event | None) -> AsyncIterator[Event]:
        """The retry loop: stream the reply, retrying a retryable failure with backoff while nothing was emitted."""
        connection = self.request.connection
        transport = transport_for(connection.kind)
        while True:
            self.attempt += 1
            received = False
            try:
                chunks = transport.stream(connection, self.request.params)
                try:
                    async for chunk in chunks:
                        received = True
                        for event in self._chunk_events(chunk):
                            yield event
                        if cancel is not None and cancel.is_set():
                            raise LLMError(errors.CANCELLED)
                finally:
                    await chunks.aclose()
                return
            except LLMError as exc:
                if exc.code == errors.CANCELLED:
                    raise
                error = errors.from_exception(
                    exc, secrets=(connection.api_key,), partial_text=self.text, streaming=received
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every provider failure becomes one of the gateway's codes
                error = errors.from_exception(
                    exc, secrets=(connection.api_key,), partial_text=self.text, streaming=received
                )
            if self.emitted or not error.retryable or self.attempt > connection.max_retries:
                if self.emitted and error.code == errors.PROVIDER_UNREACHABLE:
                    error.code = errors.STREAM_DROPPED
                error.partial_text = self.text
                raise error
            delay = backoff_delay(self.attempt, error.retry_after)
            logger.info(
                "llm retry %s/%s in %.2fs after %s (%s)",
                self.attempt, connection.max_retries, delay, error.code, error.detail,
            )  # fmt: skip
            self.text_parts.clear()
            self.builders.clear()
            self.usage_reported, self.finish_reason = None, ""
            await asyncio.sleep(delay)

    async def failed(self, exc: LLMError) -> None:
        """Record a call that ended in `exc` (cancelled or failed), keeping what arrived in its partial_text."""
        status = CallStatus.CANCELLED if exc.code == errors.CANCELLED else CallStatus.ERROR
        exc.partial_text = exc.partial_text or self.text
        if status == CallStatus.ERROR:
            logger.warning(
                "llm call failed tenant=%s model=%s code=%s detail=%s",
                self.request.tenant.pk, self.request.model, exc.code, exc.detail,
            )  # fmt: skip
        await database_sync_to_async(self.record)(status, exc.code)


def _span_name(request: ChatRequest, **call: Any) -> str:
    return traces.call_name(**call)


def _span_attributes(request: ChatRequest, **call: Any) -> dict[str, Any]:
    """The span's first attributes (llm.traces): the call's, and the request's that a span names."""
    asked = {"messages": request.messages, "tools": request.tools, "temperature": request.temperature}
    return traces.call_attributes(**asked, max_tokens=request.max_tokens, **call)


@tracing.traced_stream(_span_name, before=_span_attributes, on_item=traces.call_event)
async def stream_chat(
    request: ChatRequest,
    *,
    tenant: Tenant,
    provider: ModelProvider | None = None,
    connection: Connection | None = None,
    model: str | None = None,
    purpose: str = Purpose.CHAT,
    agent_id: int | None = None,
    conversation_id: int | None = None,
    cancel: asyncio.Event | None = None,
) -> AsyncIterator[Event]:
    """Stream the reply to `request` as events; the last one is Finished. Raises LLMError on failure.

    Give a `provider` (its connection is resolved here) or a ready `connection` plus `model`; the tenant pays and
    the call record names the purpose, agent and conversation. Setting `cancel` stops the call (LLMError
    "cancelled"); cancelling the task works too (recorded, then CancelledError). On failure after part of the reply
    arrived, the LLMError carries it in `partial_text`. An agent's calls come here through agents.modelcall.
    """
    started = time.perf_counter()
    sent = _chat_request(
        request,
        tenant=tenant,
        provider=provider,
        connection=connection,
        model=model,
        purpose=purpose,
        agent_id=agent_id,
        conversation_id=conversation_id,
    )
    await _quota_checked(sent)
    call = _Call(sent, started)
    try:
        async with aclosing(call.attempts(cancel)) as events:
            async for event in events:
                yield event
    except LLMError as exc:
        await call.failed(exc)
        raise
    except (asyncio.CancelledError, GeneratorExit):
        # The caller went away (task cancelled, or it stopped iterating): still one record of the call.
        await asyncio.shield(database_sync_to_async(call.record)(CallStatus.CANCELLED, errors.CANCELLED))
        raise

    tool_calls = tuple(call.builders[i].build() for i in sorted(call.builders))
    usage = call.final_usage()
    quota_ledger_add(tenant=tenant, tokens=usage.total_tokens)
    # Written in the background, off the caller's clock (the bench goal); started before the last events, so a
    # caller that stops at ToolCallsReady still leaves a record. Finished.recorded() waits for it.
    recording = _record_later(call.record, CallStatus.OK, "", usage)
    if tool_calls:
        yield ToolCallsReady(tool_calls)
    yield Finished(
        finish_reason=call.finish_reason or ("tool_calls" if tool_calls else "stop"),
        usage=usage,
        text=call.text,
        tool_calls=tool_calls,
        recording=recording,
        ttft_ms=_ms(call.ttft) if call.ttft is not None else None,
        duration_ms=_ms(time.perf_counter() - started),
        model=sent.model,
    )
    # A caller that reads the stream to its end gets the record written by then: an event loop made by
    # async_to_sync (Celery tasks) cancels leftover tasks when it closes, and would lose it.
    await asyncio.shield(recording)


def _add_tool_call_piece(builders: dict[int, _ToolCallBuilder], piece: Any) -> ToolCallStarted | None:
    """Fold one tool-call delta into its builder; return a ToolCallStarted when a new call begins."""
    index = piece.index if piece.index is not None else len(builders)
    builder = builders.get(index)
    # Some servers number every parallel call 0 and tell them apart by id only.
    if builder is not None and piece.id and builder.id and piece.id != builder.id:
        index = max(builders) + 1
        builder = None
    function = piece.function
    if builder is None:
        builder = builders[index] = _ToolCallBuilder(index=index, id=piece.id or f"call_{index}")
        if function is not None and function.name:
            builder.name = function.name
        if function is not None and function.arguments:
            builder.parts.append(function.arguments)
        return ToolCallStarted(index=index, id=builder.id, name=builder.name)
    if piece.id and not builder.id:
        builder.id = piece.id
    if function is not None:
        if function.name and not builder.name:
            builder.name = function.name
        if function.arguments:
            builder.parts.append(function.arguments)
    return None


async def complete_chat(
    request: ChatRequest,
    *,
    tenant: Tenant,
    provider: ModelProvider | None = None,
    connection: Connection | None = None,
    model: str | None = None,
    purpose: str = Purpose.CHAT,
    agent_id: int | None = None,
    conversation_id: int | None = None,
    cancel: asyncio.Event | None = None,
) -> ChatResult:
    """The whole reply to `request` (the arguments are stream_chat's)."""
    events = stream_chat(
        request,
        tenant=tenant,
        provider=provider,
        connection=connection,
        model=model,
        purpose=purpose,
        agent_id=agent_id,
        conversation_id=conversation_id,
        cancel=cancel,
    )
    async for event in events:
        if isinstance(event, Finished):
            return ChatResult(
                text=event.text,
                tool_calls=event.tool_calls,
                finish_reason=event.finish_reason,
                usage=event.usage,
                call_id=await event.recorded(),
                ttft_ms=event.ttft_ms,
                duration_ms=event.duration_ms,
                model=event.model,
            )
    raise LLMError(errors.PROVIDER_ERROR, detail="the stream ended without a final event")


async def embed_texts(
    *,
    tenant: Tenant,
    inputs: Sequence[str],
    provider: ModelProvider | None = None,
    connection: Connection | None = None,
    model: str | None = None,
    agent_id: int | None = None,
    conversation_id: int | None = None,
) -> list[list[float]]:
    """Embeddings of `inputs` from the provider's embedding model, quota-checked and recorded like chat calls."""
    started = time.perf_counter()
    connection = connection or connection_for(provider)  # type: ignore[arg-type]
    model = model or (provider.embedding_model if provider is not None else "")
    messages = wire(ChatMessage.user(text) for text in inputs)
    base = {
        "tenant": tenant,
        "provider_id": connection.provider_id,
        "model": model,
        "purpose": Purpose.EMBED,
        "agent_id": agent_id,
        "conversation_id": conversation_id,
    }

    def check_quota() -> None:
        with scope_of(tenant):
            try:
                quota_check(tenant=tenant, model=model, messages=messages)
            except LLMError as exc:
                llm_call_record(**base, status=CallStatus.REFUSED, error_code=exc.code, attempts=0)
                raise

    await database_sync_to_async(check_quota)()
    transport = transport_for(connection.kind)
    attempt = 0
    while True:
        attempt += 1
        try:
            vectors, reported = await transport.embed(connection, model, list(inputs))
            break
        except Exception as exc:  # mapped to the gateway's codes like chat errors
            error = errors.from_exception(exc, secrets=(connection.api_key,))
            if error.retryable and attempt <= connection.max_retries:
                await asyncio.sleep(backoff_delay(attempt, error.retry_after))
                continue
            await database_sync_to_async(llm_call_record)(
                **base,
                status=CallStatus.ERROR,
                error_code=error.code,
                duration_ms=_ms(time.perf_counter() - started),
                attempts=attempt,
            )
            raise error from exc

    prompt = reported if reported is not None else sum(tokens.count_text(t, "text-embedding-ada-002") for t in inputs)
    usage = Usage(prompt, 0, UsageSource.PROVIDER if reported is not None else UsageSource.COUNTED)
    await database_sync_to_async(llm_call_record)(
        **base, status=CallStatus.OK, usage=usage, duration_ms=_ms(time.perf_counter() - started), attempts=attempt
    )
    return vectors

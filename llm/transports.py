"""How a chat request reaches a model: one transport per provider kind, chosen from a registry.

A transport opens a streamed chat completion and yields `ChatCompletionChunk`s; the gateway (llm.client) does
the rest (retries, assembly, usage, records) the same way for all of them.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import openai
from openai.types.chat import ChatCompletionChunk

from llm.script import ErrorPlan, ScriptEngine

# Ollama and vLLM accept any key; the SDK insists on one, so keyless providers send this placeholder.
KEYLESS_PLACEHOLDER = "not-needed"


@dataclass(frozen=True)
class Connection:
    """Everything needed to reach a provider, resolved from a ModelProvider (llm.selectors.connection_for)."""

    kind: str
    base_url: str
    api_key: str = field(default="", repr=False)
    timeout: float = 60.0
    max_retries: int = 2
    provider_id: int | None = None


class Transport:
    """Base class of transports: open one streamed chat completion."""

    kind: ClassVar[str]

    def stream(self, connection: Connection, params: dict[str, Any]) -> AsyncIterator[ChatCompletionChunk]:
        """Send the request and yield its chunks; raise the SDK's errors (or LLMError) when it fails."""
        raise NotImplementedError

    async def embed(
        self, connection: Connection, model: str, inputs: list[str]
    ) -> tuple[list[list[float]], int | None]:
        """Embeddings of `inputs` and the prompt tokens the provider reports (None if it does not)."""
        raise NotImplementedError


class OpenAICompatibleTransport(Transport):
    """Any server that speaks the OpenAI chat-completions protocol, through `openai.AsyncOpenAI`."""

    kind = "openai"
    # One AsyncOpenAI per (event loop, base URL, key, timeout): building one costs more than a request, and an
    # HTTP connection pool cannot be shared between event loops.
    _clients: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, openai.AsyncOpenAI]]] = (
        weakref.WeakKeyDictionary()
    )

    def client(self, connection: Connection) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        per_loop = self._clients.setdefault(loop, {})
        key = (connection.base_url, connection.api_key, connection.timeout)
        client = per_loop.get(key)
        if client is None:
            client = openai.AsyncOpenAI(
                api_key=connection.api_key or KEYLESS_PLACEHOLDER,
                base_url=connection.base_url,
                timeout=openai.Timeout(connection.timeout, connect=min(connection.timeout, 10.0)),
                max_retries=0,  # the gateway retries itself, only before the first chunk (llm.client)
            )
            per_loop[key] = client
        return client

    async def stream(self, connection: Connection, params: dict[str, Any]) -> AsyncIterator[ChatCompletionChunk]:
        stream = await self.client(connection).chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}
        )
        try:
            async for chunk in stream:
                yield chunk
        finally:
            await stream.close()

    async def embed(
        self, connection: Connection, model: str, inputs: list[str]
    ) -> tuple[list[list[float]], int | None]:
        response = await self.client(connection).embeddings.create(model=model, input=inputs)
        usage = response.usage.prompt_tokens if response.usage else None
        return [item.embedding for item in sorted(response.data, key=lambda d: d.index)], usage


class ScriptedTransport(Transport):
    """The offline demo model: the script engine answers in-process, streamed like a server would."""

    kind = "demo"

    def __init__(self, engine: ScriptEngine | None = None) -> None:
        self._engine = engine

    @property
    def engine(self) -> ScriptEngine:
        if self._engine is None:
            from llm.demo import demo_engine

            self._engine = demo_engine()
        return self._engine

    async def stream(self, connection: Connection, params: dict[str, Any]) -> AsyncIterator[ChatCompletionChunk]:
        from llm.errors import PROVIDER_TIMEOUT, LLMError, code_for_status

        plan = self.engine.plan({**params, "stream": True, "stream_options": {"include_usage": True}})
        if isinstance(plan, ErrorPlan):
            error = plan.body["error"]
            retry_after = plan.headers.get("retry-after")
            raise LLMError(
                code_for_status(plan.status, error.get("code") or "", error.get("message") or ""),
                detail=str(error.get("message", "")),
                status=plan.status,
                retry_after=float(retry_after) if retry_after else None,
            )
        if plan.stall >= connection.timeout:
            # A stall longer than the timeout: wait the timeout out, as a client of a silent server would.
            await asyncio.sleep(connection.timeout)
            raise LLMError(PROVIDER_TIMEOUT, detail="scripted stall")
        async for chunk in plan.stream():
            yield ChatCompletionChunk.model_validate(chunk)

    async def embed(
        self, connection: Connection, model: str, inputs: list[str]
    ) -> tuple[list[list[float]], int | None]:
        from llm.script import embed

        return [embed(text) for text in inputs], None


TRANSPORTS: dict[str, Transport] = {
    OpenAICompatibleTransport.kind: OpenAICompatibleTransport(),
    ScriptedTransport.kind: ScriptedTransport(),
}


def transport_for(kind: str) -> Transport:
    """The transport registered for a provider kind."""
    try:
        return TRANSPORTS[kind]
    except KeyError:
        raise ValueError(f"No transport for provider kind {kind!r}; known: {', '.join(sorted(TRANSPORTS))}.") from None

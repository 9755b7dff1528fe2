"""Traces: the one way every floor records OpenTelemetry spans (GenAI semantic conventions; docs/observability.md).

Off unless TRACES_ENABLED: then every helper here returns at once and no span is made (the hooks cost one flag
check). On, spans go over OTLP/HTTP to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT (the
exporter reads the standard OTEL_* variables: endpoint, headers, timeout) through a batching processor, off the
caller's clock. Prompt and reply text is recorded only with TRACES_CAPTURE_CONTENT; API keys and secrets never.

- `span(name, attributes)`: a context manager, the current span inside it (children nest under it).
- `turn_span(...)`: the root of a turn; its identity (tenant, agent, conversation, user) is copied onto every span
  opened inside it, in this task, its child tasks and the database threads (it travels as baggage in the context,
  which contextvars carry there).
- `traced(name, before=..., after=...)`: the same as a decorator, for sync and async functions.
- `traced_stream(name, before=..., on_item=...)`: for an async generator (a model's streamed reply).
- `carrier()` / `resumed(carrier)`: the current span as W3C headers, to carry a trace into a thread that does not
  copy contextvars (core.background does); config.celery does the same for every Celery task (its signal hookup).
"""

from __future__ import annotations

import functools
import inspect
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import aclosing, contextmanager
from typing import Any

from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.propagate import extract, inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from core.conf import setting

SERVICE_NAME = "agentplat"
TRACER_NAME = "agentplat"
# What a span gets when traces are off (every method a no-op), so hooks never test for None.
NO_SPAN: Span = trace.INVALID_SPAN
# The longest text attribute recorded (prompt, reply, tool arguments) when content capture is on.
MAX_TEXT_CHARS = 16_000

Attributes = Mapping[str, Any]


class _State:
    """The process's tracer, read from the settings on first use (`reset` reads them again)."""

    def __init__(self) -> None:
        self.resolved = False
        self.provider: TracerProvider | None = None
        self.tracer: trace.Tracer | None = None
        self.capture = False
        # The provider was made here from the settings (reset shuts it down), not handed over by use_provider.
        self.owned = False
        self.lock = threading.Lock()


_state = _State()


def _otlp_exporter() -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415 - only when traces are on
        OTLPSpanExporter,
    )

    # No arguments: the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT itself.
    return OTLPSpanExporter()


def otlp_provider() -> TracerProvider:
    """The provider of TRACES_ENABLED: spans batched and sent over OTLP/HTTP from a thread of their own."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
    return provider


def _resolve() -> trace.Tracer | None:
    with _state.lock:
        if not _state.resolved:
            if setting("TRACES_ENABLED"):
                _install(otlp_provider(), capture=bool(setting("TRACES_CAPTURE_CONTENT")))
                _state.owned = True
            _state.resolved = True
    return _state.tracer


def _tracer() -> trace.Tracer | None:
    if _state.resolved:
        return _state.tracer
    return _resolve()


def _install(provider: TracerProvider | None, *, capture: bool) -> None:
    if _state.owned and _state.provider is not None and _state.provider is not provider:
        _state.provider.shutdown()  # its batch is sent, its thread ends
    _state.owned = False
    _state.provider = provider
    _state.tracer = provider.get_tracer(TRACER_NAME) if provider is not None else None
    _state.capture = capture and provider is not None


def use_provider(provider: TracerProvider | None, *, capture: bool = False) -> None:
    """Send spans to `provider` (tests, the bench), or turn traces off (None), whatever the settings say."""
    with _state.lock:
        _install(provider, capture=capture)
        _state.resolved = True


def provider_with(processor: SpanProcessor) -> TracerProvider:
    """A tracer provider of this service whose spans go to `processor` (for `use_provider`)."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}), shutdown_on_exit=False)
    provider.add_span_processor(processor)
    return provider


def reset() -> None:
    """Forget the tracer: the next span reads TRACES_ENABLED and TRACES_CAPTURE_CONTENT again."""
    with _state.lock:
        _state.resolved = False
        _install(None, capture=False)


def flush(timeout_millis: int = 30_000) -> bool:
    """Export the spans still batched (a worker about to exit, a test); True when nothing was left behind."""
    provider = _state.provider
    return provider.force_flush(timeout_millis) if provider is not None else True


def enabled() -> bool:
    return _tracer() is not None


def capture_content() -> bool:
    """Prompt, reply, tool arguments and comments may be recorded (TRACES_CAPTURE_CONTENT, and traces on)."""
    return _tracer() is not None and _state.capture


def text(value: Any) -> str | None:
    """`value` as a text attribute when content capture is on (JSON for anything not a string), else None."""
    if not capture_content() or value is None:
        return None
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, default=str)
    return value[:MAX_TEXT_CHARS]


def set_attributes(span: Span, attributes: Attributes | None) -> None:
    """Set the attributes that have a value (None is left out: OpenTelemetry refuses it)."""
    if attributes:
        span.set_attributes({key: value for key, value in attributes.items() if value is not None})


def _start_attributes(attributes: Attributes | None, context: otel_context.Context | None = None) -> dict[str, Any]:
    # The turn's identity travels as baggage: with the context in tasks and threads, in carrier() headers too.
    # One dict, handed to the span at its start: the SDK validates it once (each set_attributes is another pass).
    merged = baggage.get_all(context)
    if attributes:
        merged = {**merged, **attributes}
    return {key: value for key, value in merged.items() if value is not None}


def failed(span: Span, exc: BaseException) -> None:
    """Mark `span` failed with the exception's type only: its message may quote a prompt or a provider's answer."""
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR))


@contextmanager
def span(name: str, attributes: Attributes | None = None, *, kind: SpanKind = SpanKind.INTERNAL) -> Iterator[Span]:
    """A span around the block, current inside it; NO_SPAN when traces are off."""
    tracer = _tracer()
    if tracer is None:
        yield NO_SPAN
        return
    current, token = _opened(tracer, name, otel_context.get_current(), attributes, kind)
    try:
        yield current
    except BaseException as exc:
        failed(current, exc)
        raise
    finally:
        _closed(current, token)


@contextmanager
def turn_span(name: str, identity: Attributes, attributes: Attributes | None = None) -> Iterator[Span]:
    """The span of a turn: `identity` (tenant, agent, conversation, user; strings) is set on it and on every span
    opened inside it, here and wherever its context is carried."""
    tracer = _tracer()
    if tracer is None:
        yield NO_SPAN
        return
    current, token = _opened(tracer, name, _with_identity(identity), attributes, SpanKind.INTERNAL)
    try:
        yield current
    except BaseException as exc:
        failed(current, exc)
        raise
    finally:
        _closed(current, token)


def _with_identity(identity: Attributes) -> otel_context.Context:
    context = otel_context.get_current()
    for key, value in identity.items():
        if value is not None:
            context = baggage.set_baggage(key, str(value), context)
    return context


# The SDK's start_as_current_span, flattened (the decorators call these directly, no context manager between): one
# span started with all its first attributes, one attach of the context that holds it (and the turn's baggage), and
# on the way out one detach and the end. Tracing's cost is mostly the SDK's per call and per attribute work, paid
# with cold caches at every span of a real turn, so every layer left out counts.
def _opened(
    tracer: trace.Tracer, name: str, context: otel_context.Context, attributes: Attributes | None, kind: SpanKind
) -> tuple[Span, object]:
    current = tracer.start_span(
        name,
        context=context,
        kind=kind,
        attributes=_start_attributes(attributes, context),
        record_exception=False,
        set_status_on_exception=False,
    )
    return current, otel_context.attach(trace.set_span_in_context(current, context))


def _closed(current: Span, token: object) -> None:
    otel_context.detach(token)
    current.end()


def _name_of(name: str | Callable[..., str], args: tuple, kwargs: dict) -> str:
    return name(*args, **kwargs) if callable(name) else name


def traced(
    name: str | Callable[..., str],
    *,
    before: Callable[..., Attributes | None] | None = None,
    after: Callable[[Any], Attributes | None] | None = None,
    identity: Callable[..., Attributes] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a function (sync or async) with a span. `name` is a string or made from the call's arguments;
    `before(*args, **kwargs)` gives the span's first attributes, `after(result)` those of the result; `identity`
    (async functions: a turn) gives attributes copied onto every span opened inside. All run only when traces are
    on."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                tracer = _tracer()
                if tracer is None:
                    return await function(*args, **kwargs)
                attributes = before(*args, **kwargs) if before is not None else None
                context = _with_identity(identity(*args, **kwargs)) if identity else otel_context.get_current()
                current, token = _opened(tracer, _name_of(name, args, kwargs), context, attributes, SpanKind.INTERNAL)
                try:
                    result = await function(*args, **kwargs)
                    if after is not None and current.is_recording():  # a span the sampler dropped: nothing to work out
                        set_attributes(current, after(result))
                    return result
                except BaseException as exc:
                    failed(current, exc)
                    raise
                finally:
                    _closed(current, token)

            return run_async

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            if _tracer() is None:
                return function(*args, **kwargs)
            attributes = before(*args, **kwargs) if before is not None else None
            with span(_name_of(name, args, kwargs), attributes) as current:
                result = function(*args, **kwargs)
                if after is not None and current.is_recording():
                    set_attributes(current, after(result))
                return result

        return run

    return decorate


def traced_stream(
    name: str | Callable[..., str],
    *,
    before: Callable[..., Attributes | None] | None = None,
    on_item: Callable[[Span, Any], bool] | None = None,
) -> Callable[[Callable[..., AsyncIterator[Any]]], Callable[..., AsyncIterator[Any]]]:
    """Decorate an async generator with a span from the call to its last item; `on_item(span, item)` sees each
    item and returns True for the last one (the span ends there, even if the consumer never closes the
    generator). The span is not made current (a generator's consumer runs between its items, and its own spans
    belong to the turn, not to the stream); off, the generator is returned untouched."""

    def decorate(function: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        @functools.wraps(function)
        def start(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            tracer = _tracer()
            if tracer is None:
                return function(*args, **kwargs)
            attributes = _start_attributes(before(*args, **kwargs) if before is not None else None)
            opened = tracer.start_span(
                _name_of(name, args, kwargs),
                context=otel_context.get_current(),
                kind=SpanKind.CLIENT,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            )
            if not opened.is_recording():  # not sampled: the stream is returned untouched, as when off
                return function(*args, **kwargs)
            return _observed(opened, function(*args, **kwargs), on_item)

        return start

    return decorate


async def _observed(opened: Span, items: AsyncIterator[Any], on_item: Callable[[Span, Any], bool] | None):
    done = False
    try:
        async with aclosing(items) as inner:
            async for item in inner:
                if on_item is not None and on_item(opened, item) and not done:
                    done = True
                    opened.end()
                yield item
    except Exception as exc:  # not GeneratorExit or cancellation: the consumer stopped reading, nothing failed
        if not done:
            failed(opened, exc)
        raise
    finally:
        if not done:
            opened.end()


def annotate(attributes: Attributes, *, name: str | None = None) -> None:
    """Add attributes to the current span (and rename it), when traces are on."""
    if _tracer() is not None:
        current = trace.get_current_span()
        set_attributes(current, attributes)
        if name:
            current.update_name(name)


def event(name: str, attributes: Attributes | None = None) -> None:
    """An event on the current span (nothing when traces are off or no span is current)."""
    if _tracer() is not None:
        trace.get_current_span().add_event(name, _start_attributes(attributes))


def carrier() -> dict[str, str]:
    """The current span as W3C trace-context headers (empty when off), to hand to a task or another process."""
    headers: dict[str, str] = {}
    if _tracer() is not None:
        inject(headers)
    return headers


@contextmanager
def resumed(headers: Mapping[str, str] | None) -> Iterator[None]:
    """Make the span named by `headers` (from `carrier`) the parent of the spans opened inside the block."""
    if not headers or _tracer() is None:
        yield
        return
    token = otel_context.attach(extract(dict(headers)))
    try:
        yield
    finally:
        otel_context.detach(token)

"""Where the CPU of traces goes: one chat turn's four spans (core.tracing) without the turn around them.

    .venv/bin/python bench/trace_parts.py [--turns 2000] [--rounds 3]

The spans and attributes are those of bench/trace_overhead.py's turn (the turn `invoke_agent` with its identity, two
streamed `chat` calls of six events each, one `execute_tool`), opened through core.tracing's decorators around
empty bodies. Per turn, in microseconds of CPU (time.process_time):
  - off: the hooks with traces off;
  - make: spans made, attributes validated, ended and queued (a BatchSpanProcessor whose exporter drops them);
  - encode: the OTLP protobuf request of those spans (the exporter's encoder), per turn;
  - post: the real OTLP/HTTP exporter posting a flush every --block turns to a local receiver (another process),
    encoding included, so post - encode is the HTTP request's share.
trace_overhead.py measures the whole turn; this one says which part of its difference is which.

Needs: `make install` only (no database, no services: the receiver is started here).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_parser, setup_django
from trace_overhead import start_receiver


class Usage:
    prompt_tokens, completion_tokens, source = 10, 5, "provider"


class Event:
    """A streamed model event; the last one has a finish reason (llm.client.Finished's fields)."""

    def __init__(self, last: bool) -> None:
        self.finish_reason = "stop" if last else None
        self.model, self.text, self.tool_calls = "gpt-4", "It is 12:00.", []
        self.ttft_ms, self.duration_ms = 3, 10
        self.usage = Usage


def traced_turn():
    """The turn of trace_overhead.py as spans around empty bodies, attributes from the packages' traces.py."""
    from agents import traces as agent_traces
    from core import tracing
    from llm import traces as llm_traces

    conversation = type("C", (), {"tenant_id": 1, "agent_id": 2, "pk": 3, "user_id": 4, "parent_id": None})()
    message = type("M", (), {"pk": 5, "content": "What time is it?"})()
    outcome = type("O", (), {"status": "ok", "ok": True, "ask_user": None, "text": "12:00"})()
    config = type("A", (), {"name": "Clock", "kind": "chat", "version_id": None, "model": "gpt-4"})()
    result = type("R", (), {"status": "completed", "error_code": "", "message": message})()
    result.usage = type("U", (), {"prompt_tokens": 20, "completion_tokens": 10})()

    @tracing.traced_stream(llm_traces.call_name, before=llm_traces.call_attributes, on_item=llm_traces.call_event)
    async def stream(**kwargs):
        for index in range(6):
            yield Event(last=index == 5)

    @tracing.traced(agent_traces.tool_name, before=agent_traces.tool_attributes, after=agent_traces.tool_outcome)
    async def tool(tool, **kwargs):
        return outcome

    @tracing.traced(agent_traces.turn_name, identity=agent_traces.turn_identity,
                    before=agent_traces.turn_attributes, after=agent_traces.turn_result)  # fmt: skip
    async def turn(**kwargs):
        tracing.annotate(agent_traces.turn_config(config), name="invoke_agent Clock")
        for step in range(2):
            async for _ in stream(model="gpt-4", messages=[], tools=[{}], purpose="chat"):
                pass
            if step == 0:
                await tool(object(), name="bench_clock", arguments={}, call=None)
        return result

    return lambda: turn(conversation=conversation, user_message=message, sink=None)


async def per_turn(turn, provider, turns: int, block: int) -> float:
    """CPU microseconds per turn with `provider` (None: traces off), flushed every `block` turns."""
    from core import tracing

    tracing.use_provider(provider)
    for _ in range(50):
        await turn()
    if provider is not None:
        provider.force_flush()
    started = time.process_time()
    for index in range(turns):
        await turn()
        if provider is not None and index % block == block - 1:
            provider.force_flush()
    spent = time.process_time() - started
    tracing.use_provider(None)
    return spent / turns * 1e6


def encode_cost(turn, rounds: int = 200) -> float:
    """CPU microseconds per turn to encode a turn's spans as the OTLP/HTTP exporter does (ten turns a request)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from core import tracing

    memory = InMemorySpanExporter()
    tracing.use_provider(tracing.provider_with(SimpleSpanProcessor(memory)))
    for _ in range(10):
        asyncio.run(turn())
    tracing.use_provider(None)
    spans = memory.get_finished_spans()
    started = time.process_time()
    for _ in range(rounds):
        encode_spans(spans).SerializePartialToString()
    return (time.process_time() - started) / rounds / 10 * 1e6


def main() -> None:
    parser = bench_parser(
        __doc__, description="Where the CPU of a turn's spans goes: making, encoding, posting.",
        smoke="50 turns, 1 round",
    )  # fmt: skip
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--block", type=int, default=10, help="turns per flush (one OTLP request)")
    args = parser.parse_args()
    if args.smoke:
        args.turns, args.rounds = 50, 1
    setup_django("bench-trace-parts-")
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from core import tracing

    class Dropped(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    turn = traced_turn()
    receiver, port = start_receiver()
    try:
        os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"http://127.0.0.1:{port}/v1/traces"
        posted, made = tracing.otlp_provider(), tracing.provider_with(BatchSpanProcessor(Dropped()))
        print(f"CPU microseconds per turn (4 spans), {args.turns} turns, a flush every {args.block}")
        for _ in range(args.rounds):
            off = asyncio.run(per_turn(turn, None, args.turns, args.block))
            make = asyncio.run(per_turn(turn, made, args.turns, args.block))
            post = asyncio.run(per_turn(turn, posted, args.turns, args.block))
            print(f"  off {off:6.1f}   make {make:6.1f}   encode {encode_cost(turn):6.1f}   make+post {post:6.1f}")
        posted.shutdown()
    finally:
        receiver.terminate()
        receiver.wait(timeout=5)


if __name__ == "__main__":
    main()

"""What traces cost: CPU time per chat turn with traces on against off (core.tracing, docs/observability.md).

    .venv/bin/python bench/trace_overhead.py [--turns 200] [--block 10] [--capture]

Each turn is the real runtime path (agents.runtime.run_turn: the tool loop, two streamed model calls against the
scripted OpenAI-compatible server, one tool call, messages stored, model calls recorded), in a fresh conversation.
Traces on is the production configuration: TRACES_ENABLED's provider, a BatchSpanProcessor and the real OTLP/HTTP
exporter (protobuf) posting to a local receiver in another process (a plain HTTP server that answers 200), so
this process pays for making, batching, encoding and sending every span, and the receiver's work is not counted.
Turns run in blocks of --block, on and off alternately; an on block ends by flushing its spans, inside its time.
CPU is time.process_time (every thread of this process: the exporter's thread too). Goal: on/off <= 1.05.

Needs: `make install` only (a throwaway SQLite database without DATABASE_URL; the scripted model server and the
receiver are started here). No data files, no services.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_parser, setup_django

# The receiver: answers every POST with 200 and an empty body (an empty ExportTraceServiceResponse).
RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Sink(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_port, flush=True)
server.serve_forever()
"""


def start_receiver() -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)  # noqa: S603 - our code
    return process, int(process.stdout.readline())


def make_agent(tenant, port: int):
    from agents.services import agent_create
    from agents.tools import ToolResult, python_tool
    from llm.models import ModelProvider
    from tenants.scope import tenant_scope

    @python_tool(name="bench_clock", description_en="The time.", parameters={"type": "object", "properties": {}})
    def bench_clock():
        return ToolResult(content="12:00")

    with tenant_scope(tenant):
        provider, _ = ModelProvider.objects.update_or_create(
            tenant=tenant, name="bench",
            defaults={"base_url": f"http://127.0.0.1:{port}/v1", "default_chat_model": "gpt-4", "max_retries": 0,
                      "chat_models": [{"name": "gpt-4", "context_window": 8192, "function_calling": True}],
                      "timeout_seconds": 30, "is_default": True},
        )  # fmt: skip
        provider.set_api_key("bench-key")
        provider.save()
        agent = agent_create(tenant=tenant, name="Clock", system_prompt="You tell the time.", model="gpt-4",
                             token_overflow_config={"strategy": "none"})  # fmt: skip
        agent.tools = ["bench_clock"]
        agent.save()
        return agent


def new_turn(tenant, agent, user):
    from agents.services import conversation_start
    from memory.services import message_add
    from tenants.scope import tenant_scope

    with tenant_scope(tenant):
        conversation = conversation_start(agent=agent, user=user)
        message = message_add(conversation=conversation, role="user", content="What time is it?")
        conversation.tenant  # noqa: B018 - loaded outside the timed part
        return conversation, message


async def one_turn(tenant, agent, user) -> float:
    """CPU seconds of one turn (conversation and message made before the clock starts)."""
    from agents.runtime import TurnStatus, run_turn
    from agents.sinks import CollectingSink
    from core.db import database_sync_to_async

    conversation, message = await database_sync_to_async(new_turn)(tenant, agent, user)
    cpu = time.process_time()
    result = await run_turn(conversation=conversation, user_message=message, sink=CollectingSink())
    cpu = time.process_time() - cpu
    assert result.status == TurnStatus.COMPLETED and result.message.content == "It is 12:00.", result
    return cpu


async def bench(args: argparse.Namespace, tenant, agent, user, provider) -> dict[str, list[float]]:
    from core import tracing

    cpu: dict[str, list[float]] = {"off": [], "on": []}
    if args.aa:
        provider = None
    blocks = max(1, args.turns // args.block)
    for _ in range(args.warmup):
        tracing.use_provider(provider, capture=args.capture)
        await one_turn(tenant, agent, user)
        tracing.use_provider(None)
        await one_turn(tenant, agent, user)
    for block in range(2 * blocks):
        on = (block % 2 == 0) == (block // 2 % 2 == 0)  # on/off, then off/on: neither always goes first
        tracing.use_provider(provider if on else None, capture=args.capture)
        spent = []
        for _ in range(args.block):
            spent.append(await one_turn(tenant, agent, user))
        if on and provider is not None:
            started = time.process_time()
            assert provider.force_flush(30_000), "the receiver did not take the spans"
            spent[-1] += time.process_time() - started  # the export's tail belongs to the on block
        cpu["on" if on else "off"].extend(spent)
    tracing.use_provider(None)
    return cpu


def main() -> None:
    parser = bench_parser(
        __doc__, description="CPU per chat turn with traces on against off.",
        smoke="10 turns a side in blocks of 5, after 1 warm-up turn a side",
    )  # fmt: skip
    parser.add_argument("--turns", type=int, default=200, help="turns per side")
    parser.add_argument("--block", type=int, default=10, help="turns in a row on one side")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--capture", action="store_true", help="TRACES_CAPTURE_CONTENT on too (text in the spans)")
    parser.add_argument("--aa", action="store_true", help="traces off on both sides: the noise of this machine")
    args = parser.parse_args()
    if args.smoke:
        args.turns, args.block, args.warmup = 10, 5, 1

    setup_django("bench-traces-")
    from django.contrib.auth import get_user_model

    from core import tracing
    from llm.fake_server import spawn
    from tenants.models import Tenant
    from tenants.scope import tenant_scope

    script = {
        "rules": [
            {"when": {"has_tool_results": False}, "reply": {"tool_calls": [{"name": "bench_clock", "arguments": {}}]}},
            {"when": {}, "reply": {"text": "It is 12:00.", "chunk_size": 3, "delay": 0}},
        ]
    }
    model, port = spawn(script)
    receiver, receiver_port = start_receiver()
    try:
        os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"http://127.0.0.1:{receiver_port}/v1/traces"
        provider = tracing.otlp_provider()
        defaults = {"name": "Trace bench", "monthly_token_budget": 10**12}
        tenant, _ = Tenant.objects.get_or_create(slug="trace-bench", defaults=defaults)
        user, _ = get_user_model().objects.get_or_create(username="trace-bench")
        agent = make_agent(tenant, port)
        with tenant_scope(tenant):
            cpu = asyncio.run(bench(args, tenant, agent, user, provider))
        provider.shutdown()
    finally:
        for process in (model, receiver):
            process.terminate()
            process.wait(timeout=5)
    report(args, cpu)


def report(args: argparse.Namespace, cpu: dict[str, list[float]]) -> None:
    off, on = (statistics.median(cpu[side]) * 1000 for side in ("off", "on"))
    mean_off, mean_on = (sum(cpu[side]) / len(cpu[side]) * 1000 for side in ("off", "on"))
    print(f"{len(cpu['on'])} turns each side (blocks of {args.block}), one tool call and two model calls per turn, "
          f"content capture {'on' if args.capture else 'off'}")  # fmt: skip
    print(f"  traces off: CPU per turn median {off:7.2f} ms   mean {mean_off:7.2f} ms")
    what = "off too (--aa)" if args.aa else "OTLP/HTTP, batched"
    print(f"  traces on : CPU per turn median {on:7.2f} ms   mean {mean_on:7.2f} ms   ({what})")
    ratio = mean_on / mean_off
    print(f"  ratio on/off: mean {ratio:.3f}   median {on / off:.3f}   (goal <= 1.05)")
    print("  goal met" if ratio <= 1.05 else "  goal NOT met")


if __name__ == "__main__":
    main()

"""What the model gateway costs: the same streamed reply read directly with the openai SDK and through llm.client.

    .venv/bin/python bench/llm_overhead.py [--runs 50] [--tokens 500] [--delay 0.001]

The scripted server (llm.fake_server, a subprocess on 127.0.0.1) streams a reply of exactly --tokens tokens, one
token per chunk, --delay seconds apart. Direct and gateway runs alternate in one process and one event loop. The
gateway path is the production one: quota check, key decryption, retries wrapper, assembly, usage, one LLMCall row.
Without DATABASE_URL it uses a throwaway SQLite database. Goal: gateway/direct <= 1.05 on total time and
<= +2 ms on time to first token.

It also prints the CPU time this process spends per streamed reply on each path (time.process_time, all threads):
with `--tokens 20 --delay 0` that is the floor a chat turn pays for its model call alone on this machine, whatever
else the turn does (the load benchmark's zero-delay mode uses 20-token replies too).

Needs: `make install` only (a throwaway SQLite database without DATABASE_URL; the scripted model server is started
here). No data files, no services.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_parser, setup_django


async def direct_run(client, model: str, messages: list) -> tuple[float, float, str]:
    started = time.perf_counter()
    ttft = None
    parts = []
    stream = await client.chat.completions.create(
        model=model, messages=messages, stream=True, stream_options={"include_usage": True}
    )
    async for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                if ttft is None:
                    ttft = time.perf_counter() - started
                parts.append(choice.delta.content)
    return ttft or 0.0, time.perf_counter() - started, "".join(parts)


async def gateway_run(stream_chat, tenant, provider, messages: list) -> tuple[float, float, str]:
    from llm.client import TextDelta
    from llm.options import ChatRequest

    started = time.perf_counter()
    ttft = None
    parts = []
    async for event in stream_chat(ChatRequest(messages=messages), tenant=tenant, provider=provider, purpose="chat"):
        if isinstance(event, TextDelta):
            if ttft is None:
                ttft = time.perf_counter() - started
            parts.append(event.text)
    return ttft or 0.0, time.perf_counter() - started, "".join(parts)


async def bench(args: argparse.Namespace, tenant, provider) -> dict[str, list[tuple[float, float, float]]]:
    import openai

    from llm.client import stream_chat
    from llm.messages import ChatMessage, wire

    client = openai.AsyncOpenAI(api_key="bench-key", base_url=provider.base_url, max_retries=0, timeout=30)
    messages = [ChatMessage.system("You are terse."), ChatMessage.user("Write 500 tokens.")]
    results: dict[str, list[tuple[float, float, float]]] = {"direct": [], "gateway": []}
    expected = None
    for run in range(args.warmup + args.runs):
        order = ("direct", "gateway") if run % 2 == 0 else ("gateway", "direct")
        for name in order:
            cpu = time.process_time()
            if name == "direct":
                ttft, total, text = await direct_run(client, provider.default_chat_model, wire(messages))
            else:
                ttft, total, text = await gateway_run(stream_chat, tenant, provider, messages)
            cpu = time.process_time() - cpu
            expected = expected or text
            assert text == expected, "both paths must read the same reply"
            if run >= args.warmup:
                results[name].append((ttft, total, cpu))
    return results


def main() -> None:
    parser = bench_parser(
        __doc__, description="Gateway overhead against the openai SDK read directly.",
        smoke="3 runs of a 20-token reply after 1 warm-up",
    )  # fmt: skip
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--delay", type=float, default=0.001, help="seconds between streamed chunks (0: flat out)")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.warmup, args.tokens = 3, 1, 20

    setup_django()
    from llm.fake_server import spawn
    from llm.models import ModelProvider
    from tenants.models import Tenant
    from tenants.scope import tenant_scope

    script = {"rules": [{"when": {}, "reply": {"text_tokens": args.tokens, "chunk_size": 0, "delay": args.delay}}]}
    process, port = spawn(script)
    try:
        tenant, _ = Tenant.objects.get_or_create(
            slug="llm-bench", defaults={"name": "LLM bench", "monthly_token_budget": 10**12}
        )
        with tenant_scope(tenant):
            provider, _ = ModelProvider.objects.update_or_create(
                tenant=tenant,
                name="bench",
                defaults={
                    "base_url": f"http://127.0.0.1:{port}/v1",
                    "chat_models": [{"name": "gpt-4", "context_window": 8192}],
                    "default_chat_model": "gpt-4",
                    "timeout_seconds": 30,
                    "max_retries": 0,
                },
            )
            provider.set_api_key("bench-key")
            provider.save()
        with tenant_scope(tenant):
            results = asyncio.run(bench(args, tenant, provider))
    finally:
        process.terminate()
        process.wait(timeout=5)

    def medians(name: str) -> tuple[float, float]:
        return (
            statistics.median(r[0] for r in results[name]) * 1000,
            statistics.median(r[1] for r in results[name]) * 1000,
        )

    d_ttft, d_total = medians("direct")
    g_ttft, g_total = medians("gateway")
    print(f"{args.runs} runs each, {args.tokens}-token streamed reply, {args.delay * 1000:g} ms between chunks")
    print(f"  direct  (openai SDK): median TTFT {d_ttft:7.2f} ms   median total {d_total:8.2f} ms")
    print(f"  gateway (llm.client): median TTFT {g_ttft:7.2f} ms   median total {g_total:8.2f} ms")
    ratio, extra = g_total / d_total, g_ttft - d_ttft
    print(f"  total ratio gateway/direct {ratio:.3f} (goal <= 1.05)   TTFT ratio {g_ttft / d_ttft:.3f}")
    print(f"  TTFT difference {extra:+.2f} ms (goal <= +2 ms)")
    for name, label in (("direct", "openai SDK"), ("gateway", "llm.client")):
        cpu = sorted(r[2] * 1000 for r in results[name])
        print(
            f"  CPU of this process per reply, {name} ({label}): median {statistics.median(cpu):.2f} ms, "
            f"p10 {cpu[len(cpu) // 10]:.2f} ms"
        )
    print("  goal met" if ratio <= 1.05 and extra <= 2 else "  goal NOT met")


if __name__ == "__main__":
    main()

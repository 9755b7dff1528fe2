"""What an MCP tool call costs through the platform: the same tool of a real MCP server called directly with the
`mcp` client and through the agents' invoke_tool.

    .venv/bin/python bench/mcp_overhead.py [--runs 200] [--warmup 10]

The server is the test suite's (tests/mcp_servers.py: the `mcp` package's MCPServer, streamable HTTP, stateless,
JSON answers) in a thread of this process on 127.0.0.1. Three paths alternate in one event loop:
- direct: one `mcp` ClientSession kept open, `call_tool` per call (what a client program does);
- direct, new session: a session opened, initialised and closed per call;
- platform: invoke_tool with the tenant's McpTool (argument validation against the schema, the tool timeout, the
  private-address check and pinned connection, the server's session, result truncation), as the tool loop runs it.
Goal: platform/direct <= 1.2 on the median per-call time.

Needs: `make install` only (a throwaway SQLite database without DATABASE_URL; the MCP server is started here). No
data files, no services.
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

ARGUMENTS = {"a": 20, "b": 22}


async def _timed(work) -> tuple[float, float]:
    """Wall time and CPU time of this process (the server's thread included, the same for every path)."""
    started, cpu = time.perf_counter(), time.process_time()
    result = await work()
    assert result == "42", result
    return time.perf_counter() - started, time.process_time() - cpu


async def bench(args: argparse.Namespace, url: str, tool, call) -> dict[str, list[tuple[float, float]]]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from agents.tools.invoke import invoke_tool

    async def one_session_call() -> str:
        async with (
            httpx2.AsyncClient() as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as fresh,
        ):
            await fresh.initialize()
            return (await fresh.call_tool("add", ARGUMENTS)).content[0].text

    async def platform_call() -> str:
        return (await invoke_tool(tool, name=tool.name, arguments=ARGUMENTS, call=call)).text

    results: dict[str, list[tuple[float, float]]] = {"direct": [], "direct, new session": [], "platform": []}
    async with (
        httpx2.AsyncClient() as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()

        async def direct_call() -> str:
            return (await session.call_tool("add", ARGUMENTS)).content[0].text

        paths = {"direct": direct_call, "direct, new session": one_session_call, "platform": platform_call}
        for run in range(args.warmup + args.runs):
            names = list(paths) if run % 2 == 0 else list(reversed(paths))
            for name in names:
                elapsed = await _timed(paths[name])
                if run >= args.warmup:
                    results[name].append(elapsed)
    return results


def main() -> None:
    parser = bench_parser(
        __doc__, description="MCP tool call overhead against the mcp client used directly.",
        smoke="5 calls of each path after 1 warm-up",
    )  # fmt: skip
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.warmup = 5, 1

    setup_django()
    import logging

    from django.conf import settings

    from agents.tools import ToolCallContext, find_tool
    from tenants.models import Tenant
    from tenants.scope import tenant_scope
    from tests.mcp_servers import McpTestServer
    from toolservers.models import ServerTool, ToolServer
    from toolservers.services import tools_refresh

    logging.disable(logging.INFO)  # the HTTP libraries log every request at INFO
    settings.MCP_ALLOW_PRIVATE_URLS = False
    server = McpTestServer().start()
    try:
        tenant, _ = Tenant.objects.get_or_create(slug="mcp-bench", defaults={"name": "MCP bench"})
        with tenant_scope(tenant):
            row, _ = ToolServer.objects.update_or_create(
                tenant=tenant, slug="bench", defaults={"name": "bench", "url": server.url, "timeout_seconds": 30,
                                                       "private_network_allowed": True},
            )  # fmt: skip
            tools_refresh(row)
            ServerTool.objects.filter(server=row, name="add").update(enabled=True)
            tool = find_tool("mcp__bench__add", tenant=tenant)
        results = asyncio.run(bench(args, server.url, tool, ToolCallContext(tenant=tenant)))
    finally:
        server.stop()

    def median(name: str, index: int) -> float:
        return statistics.median(sample[index] for sample in results[name]) * 1000

    print(f"{args.runs} calls each of the tool `add` of an MCP server on 127.0.0.1 (stateless, JSON answers)")
    for name, samples in results.items():
        ms = sorted(sample[0] * 1000 for sample in samples)
        print(f"  {name:20s} median {median(name, 0):7.2f} ms   p90 {ms[len(ms) * 9 // 10]:7.2f} ms   "
              f"CPU median {median(name, 1):6.2f} ms")  # fmt: skip
    ratio, cpu_ratio = median("platform", 0) / median("direct", 0), median("platform", 1) / median("direct", 1)
    print(f"  ratio platform/direct {ratio:.2f} (goal <= 1.2)   CPU ratio {cpu_ratio:.2f}")
    print("  goal met" if ratio <= 1.2 else "  goal NOT met")


if __name__ == "__main__":
    main()

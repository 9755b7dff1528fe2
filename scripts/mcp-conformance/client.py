#!/usr/bin/env python3
"""The platform's own MCP client (toolservers.client, what agents call tenants' MCP servers with) as the conformance
suite's client under test: `conformance client --command "python scripts/mcp-conformance/client.py"` starts a test
server and runs this with its URL as the last argument and the scenario in MCP_CONFORMANCE_SCENARIO.

It does what the platform does with a server: lists its tools (as when an admin saves or refreshes the server), then
calls each tool the scenario expects to be called, as an agent's tool loop would, with the arguments a model would
give. Exits 1 when the platform's client reports the server unavailable.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

# The repository's root on the path and its settings: this runs as a script, outside manage.py.
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")  # a local script: no production secret key to ask for

import django  # noqa: E402

django.setup()

from toolservers.client import Connection, ServerUnavailable, call_tool, list_tools  # noqa: E402

# The calls a scenario expects (tool name → the arguments a model would give).
CALLS = {"tools_call": {"add_numbers": {"a": 2, "b": 3}}, "sse-retry": {"test_reconnection": {}}}


async def main(url: str, scenario: str) -> int:
    # The suite's test server is on localhost: a private address, which only the operator may allow (as here).
    connection = Connection(name="conformance", url=url, timeout=20, private_allowed=True)
    try:
        listing = await list_tools(connection)
        names = {tool.name for tool in listing.tools}
        print(f"listed: {sorted(names)}")
        for name, arguments in CALLS.get(scenario, {}).items():
            if name not in names:
                print(f"the server did not list {name}", file=sys.stderr)
                return 1
            result = await call_tool(connection, name, arguments)
            print(f"{name}: {result.text} (error: {result.is_error})")
    except ServerUnavailable as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", ""))))

"""A real MCP server for the tests and the bench: the `mcp` package's MCPServer over streamable HTTP (stateless,
JSON answers) on 127.0.0.1 and a free port, served by uvicorn in a daemon thread of the process."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)


def build_server() -> MCPServer:
    server = MCPServer("test-tools")

    @server.tool()
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}, 21 °C"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def fail(reason: str) -> str:
        """A tool that always fails."""
        raise ValueError(f"cannot do it: {reason}")

    @server.tool()
    async def slow(seconds: float) -> str:
        """A tool that takes its time."""
        await asyncio.sleep(seconds)
        return "finally"

    @server.tool()
    def big(size: int) -> str:
        """A tool that returns a large text."""
        return "x" * size

    return server


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class McpTestServer:
    """The server above, running; `url` is its streamable HTTP endpoint."""

    def __init__(self) -> None:
        self.port = _free_port()
        app = build_server().streamable_http_app(stateless_http=True, json_response=True)
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, name="mcp-test-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> McpTestServer:
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(5)


class HostileMcpServer(McpTestServer):
    """A low-level MCP server that lists and answers whatever a test sets (`tools`, `result_text`): what a careless
    or hostile server can send. It answers over SSE (as most servers do) unless `json_response`. A tool's result is
    sent twice, as the `mcp` package's own servers send a text: its text content and its structured content."""

    def __init__(self, *, json_response: bool = False) -> None:
        self.tools: list[Tool] = []
        self.result_text = ""
        self.port = _free_port()
        server = Server("hostile-tools", on_list_tools=self._list, on_call_tool=self._call)
        app = server.streamable_http_app(stateless_http=True, json_response=json_response)
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, name="mcp-hostile-server", daemon=True)

    async def _list(self, ctx: object, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=self.tools)

    async def _call(self, ctx: object, params: CallToolRequestParams) -> CallToolResult:
        text = self.result_text
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content={"result": text})


def hostile_tool(name: str, description: str = "", schema: dict | None = None) -> Tool:
    """A tool for HostileMcpServer.tools (an empty object schema unless given)."""
    return Tool(name=name, description=description, input_schema=schema or {"type": "object", "properties": {}})

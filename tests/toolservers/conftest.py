"""Fixtures of the MCP client tests: real MCP servers on 127.0.0.1 (a well-behaved one, and hostile ones answering
what a test sets, over SSE or JSON), and a tenant's server row pointing at one."""

from __future__ import annotations

import pytest

from tenants.scope import tenant_scope
from tests.mcp_servers import HostileMcpServer, McpTestServer
from toolservers.models import ToolServer
from toolservers.services import tools_refresh


@pytest.fixture(scope="session")
def mcp_test_server():
    server = McpTestServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _hostile_sse_server():
    server = HostileMcpServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _hostile_json_server():
    server = HostileMcpServer(json_response=True).start()
    yield server
    server.stop()


@pytest.fixture
def hostile_server(_hostile_sse_server):
    """A server listing and answering what the test sets (`tools`, `result_text`), over SSE."""
    _hostile_sse_server.tools, _hostile_sse_server.result_text = [], ""
    return _hostile_sse_server


@pytest.fixture
def hostile_json_server(_hostile_json_server):
    """The same, answering JSON."""
    _hostile_json_server.tools, _hostile_json_server.result_text = [], ""
    return _hostile_json_server


@pytest.fixture
def allow_private(settings):
    """The test server is on loopback, which the platform refuses unless the operator allows it."""
    settings.MCP_ALLOW_PRIVATE_URLS = True


@pytest.fixture
def make_server(mcp_test_server, allow_private):
    """make_server(tenant, enable=("weather",), **fields) -> a ToolServer with its tools listed and some enabled."""

    def make(tenant, enable=("weather",), **fields) -> ToolServer:
        with tenant_scope(tenant):
            server = ToolServer(tenant=tenant, name=fields.pop("name", "Test tools"), slug=fields.pop("slug", "tt"),
                                url=fields.pop("url", mcp_test_server.url), **fields)  # fmt: skip
            server.set_headers({"Authorization": "Bearer s3cret-token"})
            server.save()
            tools = tools_refresh(server)
            for tool in tools:
                if tool.name in enable:
                    tool.enabled = True
                    tool.save()
        return server

    return make

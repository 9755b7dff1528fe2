"""Fixtures of the MCP client tests: a real MCP server on 127.0.0.1, and a tenant's server row pointing at it."""

from __future__ import annotations

import pytest

from tenants.scope import tenant_scope
from tests.mcp_servers import McpTestServer
from toolservers.models import ToolServer
from toolservers.services import tools_refresh


@pytest.fixture(scope="session")
def mcp_test_server():
    server = McpTestServer().start()
    yield server
    server.stop()


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

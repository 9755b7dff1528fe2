"""Tenants' MCP tools as agent tools: each enabled tool of a tenant's MCP servers (toolservers) is a `Tool` that
exists only for that tenant, found through agents.tools.registry's per-tenant tool sources.

The `mcp` client is async and so is a tool's `run`: the tool loop awaits it in its own event loop, under
invoke_tool's timeout (AGENT_TOOL_TIMEOUT) and the server's own. A failure of the server (unreachable, refused,
slow) or of the tool (`isError`) becomes a ToolError, which the model reads as the call's result; a long result is
cut to MCP_TOOL_MAX_CHARS with a note saying so.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from agents.tools.base import Tool, ToolCallContext, ToolError, ToolResult
from agents.tools.registry import register_tool_source
from core.conf import setting
from tenants.models import Tenant
from toolservers.client import ServerUnavailable, call_tool
from toolservers.models import FUNCTION_PREFIX, ServerTool
from toolservers.services import connection_for, enabled_tools


def truncated(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and a note that the rest was left out."""
    if len(text) <= limit:
        return text
    note = _("[The result was cut: it had %(total)s characters; only the first %(shown)s are shown.]") % {
        "total": len(text),
        "shown": limit,
    }
    return f"{text[:limit]}\n{note}"


class McpTool(Tool):
    """One enabled tool of a tenant's MCP server, offered to models as `mcp__<server>__<tool>`."""

    def __init__(self, row: ServerTool) -> None:
        self.name = row.function_name
        self.tool_name = row.name
        # Read in the tenant's scope with the row (toolservers.services.enabled_tools): never another tenant's.
        self.connection = connection_for(row.server)
        self.group = row.server.name
        self.label_en = self.label_zh = f"{row.server.name} › {row.name}"
        self.description_en = self.description_zh = row.description or row.name
        self.parameters = row.input_schema or {"type": "object", "properties": {}}

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        try:
            answer = await call_tool(self.connection, self.tool_name, arguments)
        except ServerUnavailable as exc:
            raise ToolError(str(exc)) from None
        text = truncated(answer.text, int(setting("MCP_TOOL_MAX_CHARS")))
        if answer.is_error:
            raise ToolError(_("%(name)s reported an error: %(text)s") % {"name": self.tool_name, "text": text})
        return ToolResult(content=text)


def mcp_tools(tenant: Tenant, names: frozenset[str] | None) -> list[Tool]:
    """The tenant's enabled MCP tools (only those among `names`, when given)."""
    if names is not None and not any(name.startswith(FUNCTION_PREFIX) for name in names):
        return []  # no database read for agents without MCP tools
    tools = [McpTool(row) for row in enabled_tools(tenant)]
    return [tool for tool in tools if names is None or tool.name in names]


register_tool_source(FUNCTION_PREFIX, mcp_tools)

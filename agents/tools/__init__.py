"""Tools and plugins an agent can call (A4-A6): a base class, a registry, and the built-in tools."""

from agents.tools.base import Tool, ToolCallContext, ToolError, ToolResult
from agents.tools.registry import (
    all_tools,
    find_tool,
    get_tool,
    python_tool,
    register_tool,
    register_tool_source,
    tenant_tools,
    tool_labels,
    tool_refusal,
    tools_available,
    tools_for,
)

__all__ = [
    "Tool",
    "ToolCallContext",
    "ToolError",
    "ToolResult",
    "all_tools",
    "find_tool",
    "get_tool",
    "python_tool",
    "register_tool",
    "register_tool_source",
    "tenant_tools",
    "tool_labels",
    "tool_refusal",
    "tools_available",
    "tools_for",
]

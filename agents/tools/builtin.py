"""The built-in tools, registered on import (agents.apps imports this module)."""

from agents.tools import ask, http, knowledge, mcp, memory, think

__all__ = ["ask", "http", "knowledge", "mcp", "memory", "think"]

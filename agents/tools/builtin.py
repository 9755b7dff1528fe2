"""The built-in tools, registered on import (agents.apps imports this module)."""

from agents.tools import ask, http, think

__all__ = ["ask", "http", "think"]

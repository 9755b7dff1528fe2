"""`{% agent_tools agent as tools %}`: an agent's configured tools with their descriptions in the active language."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import template

from agents.tools import get_tool

register = template.Library()


@dataclass(frozen=True)
class ToolLine:
    name: str
    description: str
    registered: bool


@register.simple_tag
def agent_tools(agent: Any) -> list[ToolLine]:
    lines = []
    for name in agent.tools or []:
        tool = get_tool(name)
        lines.append(ToolLine(name=name, description=tool.description() if tool else "", registered=tool is not None))
    return lines

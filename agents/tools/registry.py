"""The tool registry: built-in tools, tool packs and registered Python functions, by name."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from agents.tools.base import Tool, ToolCallContext, ToolResult

_tools: dict[str, Tool] = {}


def register_tool(tool: Tool | type[Tool]) -> Tool:
    """Register a tool (an instance, or a class to instantiate); usable as a class decorator. Names are unique."""
    instance = tool() if isinstance(tool, type) else tool
    if not instance.name:
        raise ValueError(f"{type(instance).__name__} has no name")
    existing = _tools.get(instance.name)
    if existing is not None and type(existing) is not type(instance):
        raise ValueError(f"A tool named {instance.name!r} is already registered ({type(existing).__name__}).")
    _tools[instance.name] = instance
    return tool if isinstance(tool, type) else instance


def get_tool(name: str) -> Tool | None:
    return _tools.get(name)


def all_tools() -> list[Tool]:
    return sorted(_tools.values(), key=lambda tool: tool.name)


def tools_for(names: Iterable[str]) -> list[Tool]:
    """The registered tools among `names`, in that order (unknown names are left out)."""
    return [_tools[name] for name in names if name in _tools]


class PythonFunctionTool(Tool):
    """A registered Python function (also what workflow `custom` steps call): no user code is ever evaluated."""

    def __init__(self, func: Callable[..., Any], *, name: str, description_en: str, description_zh: str,
                 parameters: dict[str, Any]) -> None:  # fmt: skip
        self.func = func
        self.name = name
        self.description_en = description_en
        self.description_zh = description_zh
        self.parameters = parameters
        self.wants_call = "call" in inspect.signature(func).parameters

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        kwargs = {**arguments, "call": call} if self.wants_call else dict(arguments)
        value = self.func(**kwargs)
        if inspect.isawaitable(value):
            value = await value
        return value if isinstance(value, ToolResult) else ToolResult(content=value)


def python_tool(
    *, name: str, description_en: str, description_zh: str = "", parameters: dict[str, Any] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a Python function as a tool. It takes the arguments as keywords (and `call`, the
    ToolCallContext, if it names it) and returns a ToolResult or any JSON-serialisable value; sync or async."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        register_tool(
            PythonFunctionTool(
                func,
                name=name,
                description_en=description_en,
                description_zh=description_zh,
                parameters=parameters or {"type": "object", "properties": {}},
            )
        )
        return func

    return decorate

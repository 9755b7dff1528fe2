"""The tool registry: built-in tools, tool packs and registered Python functions, by name.

A pack's tool (`Tool.pack`) exists only for the tenants that have the pack enabled (tenants.packs), and a tool
source's tools (`register_tool_source`: a tenant's MCP servers' enabled tools, agents.tools.mcp) only for their
tenant: what a tenant is offered or may run goes through `tools_available`, `tools_for`, `find_tool` and
`tool_refusal`; `get_tool` and `all_tools` are the registry itself, whatever the tenant. The per-tenant lookups
read the database (sync).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext as _

from agents.tools.base import Tool, ToolCallContext, ToolResult
from core.registry import Registry
from tenants.packs import pack_enabled, pack_name

if TYPE_CHECKING:
    from tenants.models import Tenant

_tools: Registry[Tool] = Registry("the tools (agents.tools.registry)", order=lambda tool: tool.name)

# A tenant's own tools, built per call: (tenant, names or None for all) -> the tools of those names it has.
ToolSource = Callable[["Tenant", "frozenset[str] | None"], list[Tool]]
_sources: Registry[ToolSource] = Registry("the per-tenant tool sources (agents.tools.registry)")


def register_tool_source(prefix: str, source: ToolSource) -> ToolSource:
    """Register a source of per-tenant tools, whose names all start with `prefix` (no registered tool's does)."""
    return _sources.register(prefix, source)


def tenant_tool_name(name: str) -> bool:
    """Whether `name` has the form of a tenant's own tool (which only a lookup with the tenant can confirm)."""
    return any(name.startswith(prefix) for prefix, _source in _sources.items())


def tenant_tools(tenant: Tenant, names: Iterable[str] | None = None) -> list[Tool]:
    """The tools the tenant's sources give it (only those among `names`, when given)."""
    wanted = frozenset(names) if names is not None else None
    return [tool for source in _sources.values() for tool in source(tenant, wanted)]


def find_tool(name: str, *, tenant: Tenant | None) -> Tool | None:
    """The registered tool `name`, else the tenant's own tool of that name (None: neither)."""
    tool = _tools.find(name)
    if tool is not None or tenant is None:
        return tool
    return next(iter(tenant_tools(tenant, [name])), None)


def register_tool(tool: Tool | type[Tool]) -> Tool:
    """Register a tool (an instance, or a class to instantiate); usable as a class decorator. Names are unique:
    another tool of a registered name is refused (core.registry.DuplicateRegistration, a ValueError)."""
    instance = tool() if isinstance(tool, type) else tool
    if not instance.name:
        raise ValueError(f"{type(instance).__name__} has no name")
    _tools.register(instance.name, instance)
    return tool if isinstance(tool, type) else instance


def get_tool(name: str) -> Tool | None:
    return _tools.find(name)


def all_tools() -> list[Tool]:
    return _tools.values()


def tool_labels(language: str | None = None, *, tenant: Tenant | None = None) -> dict[str, str]:
    """Every registered tool's display label by name, in `language` (default: the active one), and with `tenant`
    its own tools' too: what a page maps a progress frame's tool name through (the frame keeps the identifier, each
    page shows its own language)."""
    labels = {name: tool.label(language) for name, tool in _tools.items()}
    if tenant is not None:
        labels.update((tool.name, tool.label(language)) for tool in tenant_tools(tenant))
    return labels


def tools_available(tenant: Tenant) -> list[Tool]:
    """The tools `tenant` may use: the platform's and those of the packs enabled for it, by name, then its own."""
    return [tool for tool in all_tools() if pack_enabled(tenant, tool.pack)] + tenant_tools(tenant)


def tools_for(names: Iterable[str], *, tenant: Tenant) -> list[Tool]:
    """The tools among `names` that `tenant` may use, in that order (unknown and unavailable names left out)."""
    names = list(names)
    own = {tool.name: tool for tool in tenant_tools(tenant, [name for name in names if name not in _tools])}
    tools = (_tools.find(name) or own.get(name) for name in names)
    return [tool for tool in tools if tool is not None and pack_enabled(tenant, tool.pack)]


def tool_refusal(name: str, *, tenant: Tenant | None) -> str | None:
    """Why `tenant` may not use the tool `name`, in words that say what to do (None: it may)."""
    tool = find_tool(name, tenant=tenant)
    if tool is None:
        return _("No tool named “%(name)s” is registered.") % {"name": name}
    if pack_enabled(tenant, tool.pack):
        return None
    return _(
        "The tool “%(name)s” belongs to the %(pack)s pack, which is not enabled for this tenant: ask the platform "
        "operator to enable it (Admin › Tenants), or remove the tool."
    ) % {"name": name, "pack": pack_name(tool.pack)}


class PythonFunctionTool(Tool):
    """A registered Python function (also what workflow `custom` steps call): no user code is ever evaluated."""

    def __init__(self, func: Callable[..., Any], *, name: str, description_en: str, description_zh: str,
                 parameters: dict[str, Any], pack: str = "", label_en: str = "",
                 label_zh: str = "") -> None:  # fmt: skip
        self.func = func
        self.name = name
        self.pack = pack
        self.label_en = label_en
        self.label_zh = label_zh
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
    *,
    name: str,
    description_en: str,
    description_zh: str = "",
    parameters: dict[str, Any] | None = None,
    pack: str = "",
    label_en: str = "",
    label_zh: str = "",
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a Python function as a tool (of the pack `pack`, if given; `label_en`/`label_zh`: the name pages
    show, else the identifier). It takes the arguments as keywords (and
    `call`, the ToolCallContext, if it names it) and returns a ToolResult or any JSON-serialisable value; sync or
    async."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        register_tool(
            PythonFunctionTool(
                func,
                name=name,
                description_en=description_en,
                description_zh=description_zh,
                parameters=parameters or {"type": "object", "properties": {}},
                pack=pack,
                label_en=label_en,
                label_zh=label_zh,
            )
        )
        return func

    return decorate

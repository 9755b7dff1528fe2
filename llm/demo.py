"""The offline demo model: the script engine with llm/scripts/demo.yaml, answering in-process.

Used by `make run` when no OPENAI_API_KEY / OPENAI_BASE_URL is set; labelled everywhere as
"演示模型（离线脚本）/ Demo model (offline, scripted)". Importable without Django (the fake server uses it).

The demo model knows a tool by the labels pages show for it, as a user calls it ("知识库检索", "Menu lookup"): the
agents app, a floor above, registers where they are read (`register_tool_labels`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from core.registry import Slot
from llm.script import ScriptEngine, load_script
from llm.script_tools import ToolLabels

if TYPE_CHECKING:
    from tenants.models import Tenant

DEMO_SCRIPT_PATH = Path(__file__).resolve().parent / "scripts" / "demo.yaml"


_labels: Slot[ToolLabels] = Slot(
    "the tools' labels for the demo model (llm.demo)", filled_by="the agents app (agents.apps)", required=False
)


def register_tool_labels(labels: ToolLabels) -> None:
    """`labels(name)` is a tool's labels in every language (empty when unknown); called from AppConfig.ready()."""
    _labels.register(labels)


def tool_labels(name: str) -> Sequence[str]:
    """The labels of the tool `name` that the demo model knows it by (none before the agents app registers them)."""
    return _labels.get()(name) if _labels.filled else ()


@functools.cache
def demo_engine() -> ScriptEngine:
    """The process's demo script engine (loaded once)."""
    return ScriptEngine(load_script(DEMO_SCRIPT_PATH), labels=tool_labels)


def seed_demo_providers(tenants: Sequence[Tenant], write: Callable[[str], None]) -> None:
    """seed_demo: each demo tenant gets the offline demo model, or the real provider of OPENAI_* when set."""
    # The fake model server (python -m llm.fake_server) imports this module without Django: models only here.
    from llm.services import provider_ensure_demo, provider_ensure_openai  # noqa: PLC0415

    api_key, base_url = settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL
    for tenant in tenants:
        if api_key or base_url:
            provider_ensure_openai(
                tenant=tenant,
                name="OpenAI-compatible (from OPENAI_* settings)",
                base_url=base_url or "https://api.openai.com/v1",
                api_key=api_key,
                model=settings.OPENAI_MODEL,
            )
            provider_ensure_demo(tenant=tenant, make_default=False)
        else:
            provider_ensure_demo(tenant=tenant)
    if api_key or base_url:
        write(f"Model / 模型: {settings.OPENAI_MODEL} @ {base_url or 'https://api.openai.com/v1'}")
    else:
        write("Model / 模型: 演示模型（离线脚本）/ Demo model (offline, scripted)")

"""For the data migrations that made packs tenant features: before them every tenant had every pack, so a tenant
that already uses a pack (its tools in an agent, a published version or a workflow, or rows in its tables) keeps
it enabled. Works on historical models (a migration's `apps`) as on the live ones, through the unscoped base
manager: a migration runs outside any tenant scope.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any


def _names_in_workflow(text: Any, names: frozenset[str]) -> bool:
    if not isinstance(text, str) or not text:
        return False
    pattern = r"^\s*(?:-\s*)?(?:plugin|function)\s*:\s*['\"]?(" + "|".join(map(re.escape, names)) + r")['\"]?\s*$"
    return re.search(pattern, text, flags=re.MULTILINE) is not None


def _uses(tools: Any, names: frozenset[str]) -> bool:
    return isinstance(tools, list) and any(isinstance(name, str) and name in names for name in tools)


def tenants_using(apps: Any, *, tool_names: Iterable[str], models: Sequence[tuple[str, str]] = ()) -> set[int]:
    """The ids of the tenants whose agents, versions or workflows name one of `tool_names`, or that have rows in
    one of `models` (app label, model name)."""
    names = frozenset(tool_names)
    found: set[int] = set()
    for label, name in models:
        model = apps.get_model(label, name)
        found.update(model._base_manager.values_list("tenant_id", flat=True).distinct())
    agents = apps.get_model("agents", "Agent")._base_manager
    found.update(tenant for tenant, tools in agents.values_list("tenant_id", "tools").iterator() if _uses(tools, names))
    versions = apps.get_model("agents", "AgentVersion")._base_manager
    for tenant, snapshot in versions.values_list("tenant_id", "snapshot").iterator():
        if isinstance(snapshot, dict) and (
            _uses(snapshot.get("tools"), names) or _names_in_workflow(snapshot.get("workflow_yaml"), names)
        ):
            found.add(tenant)
    workflows = apps.get_model("agents", "Workflow")._base_manager
    found.update(tenant for tenant, text in workflows.values_list("tenant_id", "yaml").iterator()
                 if _names_in_workflow(text, names))  # fmt: skip
    return found


def enable_where_used(
    apps: Any, *, pack: str, tool_names: Iterable[str], models: Sequence[tuple[str, str]] = ()
) -> list[int]:
    """Enable `pack` for every tenant that uses it (see `tenants_using`); returns the ids of the tenants changed."""
    tenants = apps.get_model("tenants", "Tenant")._base_manager
    changed = []
    for tenant in tenants.filter(pk__in=tenants_using(apps, tool_names=tool_names, models=models)):
        packs = list(tenant.packs or [])
        if pack not in packs:
            tenant.packs = sorted([*packs, pack])
            tenant.save(update_fields=["packs"])
            changed.append(tenant.pk)
    return changed

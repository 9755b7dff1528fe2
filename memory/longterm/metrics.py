"""Counters of long-term memory per agent and day (MemoryMetric)."""

from __future__ import annotations

from memory.counters import daily_counts_add
from memory.models import MemoryMetric
from tenants.scope import current_tenant


def count(*, agent_id: int | None, **counts: int) -> None:
    """Add to today's memory counters of `agent_id` in the active tenant (0: no agent, e.g. a manual memory)."""
    tenant = current_tenant()
    if tenant is None or not any(counts.values()):
        return
    daily_counts_add(MemoryMetric, tenant_id=tenant.pk, agent_id=agent_id or 0, **counts)

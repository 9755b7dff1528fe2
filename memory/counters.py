"""Per agent and day counters (OverflowMetric, MemoryMetric): added to with F() updates, so concurrent turns do
not lose counts."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from memory.models import OverflowMetric


def overflow_metric_add(
    *, tenant_id: int, agent_id: int, triggers: int = 0, summaries_made: int = 0, summaries_failed: int = 0,
    summaries_retried: int = 0, tokens_saved: int = 0,
) -> None:  # fmt: skip
    """Add to today's overflow counters of an agent (only the counters given)."""
    counts = {
        "triggers": triggers, "summaries_made": summaries_made, "summaries_failed": summaries_failed,
        "summaries_retried": summaries_retried, "tokens_saved": tokens_saved,
    }  # fmt: skip
    counts = {name: n for name, n in counts.items() if n}
    if counts:
        daily_counts_add(OverflowMetric, tenant_id=tenant_id, agent_id=agent_id, **counts)


def daily_counts_add(model: type[Any], *, tenant_id: int, agent_id: int, **counts: int) -> None:
    """Add to today's counters of an agent in `model` (a per agent and day row; F() updates, so concurrent turns do
    not lose counts)."""
    day = timezone.localdate()
    today = model.objects.filter(tenant_id=tenant_id, agent_id=agent_id, day=day)
    # One UPDATE on the common path; the day's first event creates the row.
    if today.update(**{name: F(name) + value for name, value in counts.items()}):
        return
    try:
        with transaction.atomic():
            model.objects.create(tenant_id=tenant_id, agent_id=agent_id, day=day, **counts)
    except IntegrityError:  # another process created it first
        today.update(**{name: F(name) + value for name, value in counts.items()})

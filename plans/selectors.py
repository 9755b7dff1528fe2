"""Plan selectors."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from plans.models import LogKind, Plan, PlanLog, StepRecord


def record_for_tenant(*, tenant: Any, record_id: uuid.UUID) -> StepRecord | None:
    """The tenant's step record with this recordId, or None (another tenant's record is never found)."""
    return StepRecord.objects.filter(tenant=tenant, recordId=record_id).select_related("step").first()


def plan_for_tenant(*, tenant: Any, plan_id: uuid.UUID) -> Plan | None:
    """The tenant's plan with this planId, or None (another tenant's plan is never found)."""
    return Plan.objects.filter(tenant=tenant, planId=plan_id).select_related("conversation").first()


@dataclass
class LogEntry:
    """One PlanLog row as the log page shows it: a one-line summary and the whole data as JSON."""

    log: PlanLog
    summary: str
    data_json: str

    @property
    def step(self) -> int | None:
        return self.log.step


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _summary(log: PlanLog) -> str:
    data = log.data if isinstance(log.data, dict) else {}
    if log.kind == LogKind.TOOL_CALL:
        line = f"{data.get('name', '')}({_short(data.get('arguments') or {}, 80)})"
        if data.get("status"):
            line += f" {data['status']}"
        if data.get("result"):
            line += f" → {_short(data['result'], 100)}"
        return line
    if log.kind == LogKind.MODEL_CALL:
        usage = data.get("usage") or {}
        parts = [str(data.get("role") or "")]
        if data.get("call_id"):
            parts.append(f"call {data['call_id']}")
        if data.get("tool_calls"):
            parts.append("→ " + ", ".join(str(name) for name in data["tool_calls"]))
        if usage:
            parts.append(f"{usage.get('prompt_tokens', 0)} + {usage.get('completion_tokens', 0)} tokens")
        return " · ".join(part for part in parts if part)
    parts = [str(data[key]) for key in ("event", "status") if data.get(key)]
    if data.get("userQuery"):
        parts.append(_short(data["userQuery"], 80))
    return " · ".join(parts)


def plan_log_entries(*, plan: Plan, step: int | None = None) -> list[LogEntry]:
    """The plan's log in order (O1: state before/after each step, model calls, tool calls), or one step's rows."""
    rows = PlanLog.objects.filter(plan=plan).order_by("id")
    if step is not None:
        rows = rows.filter(step=step)
    return [
        LogEntry(log=row, summary=_summary(row), data_json=json.dumps(row.data, ensure_ascii=False, indent=2))
        for row in rows
    ]

"""What a plan step's span says (core.tracing; docs/observability.md): the plan, the step and its agent, and how
the step ended. The step's agent answers in a turn of its own, a child of this span."""

from __future__ import annotations

from typing import Any


def step_name(plan: Any, step: Any, turn: Any) -> str:
    return f"plan_step {step.seqNo}"


def step_attributes(plan: Any, step: Any, turn: Any) -> dict[str, Any]:
    return {
        "agentplat.plan.id": plan.pk,
        "agentplat.plan.step": step.seqNo,
        "agentplat.plan.step_agent": step.agentName,
    }


def step_result(result: dict[str, Any]) -> dict[str, Any]:
    return {"agentplat.plan.step_status": str(result.get("status", ""))}

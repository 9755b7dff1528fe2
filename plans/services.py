"""Plan services: validation and creation of a plan, state changes, logs. Synchronous; callers wrap them."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from agents.models import AgentKind
from agents.selectors import agent_list_for_planner
from memory.models import Conversation
from plans.models import LogKind, Plan, PlanLog, PlanStatus, PlanStep, StepStatus
from plans.tasks import ask_timeout_cancel


def agents_available(*, tenant: Any) -> list[dict[str, str]]:
    """The agents a plan may use (agents.selectors.agent_list_for_planner: active and published, never a draft),
    with their descriptions; not planners, and not long-lived goal agents (they run from their own page)."""
    return [
        {"agentName": agent.name, "description": agent.description}
        for agent in agent_list_for_planner(tenant=tenant)
        if agent.kind not in (AgentKind.PLANNER, AgentKind.GOAL)
    ]


def plan_problems(*, tenant: Any, steps: Any) -> list[str]:
    """What is wrong with a proposed plan: unknown, inactive or unpublished agents, repeated seqNo, unknown deps, a
    cycle."""
    if not isinstance(steps, list) or not steps:
        return [_("A plan needs at least one step.")]
    names = {row["agentName"] for row in agents_available(tenant=tenant)}
    problems: list[str] = []
    seqs: dict[int, list[int]] = {}
    for step in steps:
        if not isinstance(step, dict) or not isinstance(step.get("seqNo"), int):
            problems.append(_("Every step needs an integer seqNo."))
            continue
        seq = step["seqNo"]
        if seq < 1:
            problems.append(
                _("Step %(seq)s: number the steps from 1 (index 0 is the plan's own reply in the stream).")
                % {"seq": seq}
            )
        if seq in seqs:
            problems.append(_("seqNo %(seq)s is used twice.") % {"seq": seq})
        if step.get("agentName") not in names:
            problems.append(
                _("Step %(seq)s: agent %(name)s does not exist, is not active or is not published.")
                % {"seq": seq, "name": step.get("agentName")}
            )
        seqs[seq] = [dep for dep in step.get("depends_on") or [] if isinstance(dep, int)]
    for seq, deps in seqs.items():
        for dep in deps:
            if dep not in seqs:
                problems.append(_("Step %(seq)s depends on unknown step %(dep)s.") % {"seq": seq, "dep": dep})
    if not problems and _has_cycle(seqs):
        problems.append(_("The steps' dependencies form a cycle."))
    return problems


def _has_cycle(graph: dict[int, list[int]]) -> bool:
    state: dict[int, int] = {}

    def visit(node: int) -> bool:
        if state.get(node) == 1:
            return True
        if state.get(node) == 2:
            return False
        state[node] = 1
        if any(visit(dep) for dep in graph.get(node, [])):
            return True
        state[node] = 2
        return False

    return any(visit(node) for node in graph)


def plan_create(
    *, conversation: Conversation, name: str, user_query: str, steps: list[dict[str, Any]], allow_concurrency: bool
) -> Plan:
    plan = Plan.objects.create(
        tenant_id=conversation.tenant_id,
        conversation=conversation,
        name=name[:200],
        userQuery=user_query,
        allow_concurrency=allow_concurrency,
    )
    for step in steps:
        PlanStep.objects.create(
            tenant_id=conversation.tenant_id,
            plan=plan,
            seqNo=step["seqNo"],
            agentName=step["agentName"],
            requirement=str(step.get("requirement") or ""),
            depends_on=[dep for dep in step.get("depends_on") or [] if isinstance(dep, int)],
        )
    plan_log(plan=plan, kind=LogKind.STATE, data={"status": plan.status, "event": "created"})
    return plan


def plan_log(*, plan: Plan, kind: str, data: dict[str, Any], step: int | None = None) -> None:
    PlanLog.objects.create(tenant_id=plan.tenant_id, plan=plan, step=step, kind=kind, data=data)


def interrupted_plan(*, conversation: Conversation) -> Plan | None:
    return Plan.objects.filter(conversation=conversation, status=PlanStatus.INTERRUPTED).order_by("-id").first()


def plan_resume(*, plan: Plan, user_query: str) -> Plan:
    """The user's new message resumes the plan at its interrupted step; completed steps stay done."""
    plan.userQuery = user_query
    plan.status = PlanStatus.RUNNING
    plan.save(update_fields=["userQuery", "status", "updated_at"])
    # The step runs again: its question (kept in the log) is no longer its result.
    plan.steps.filter(status=StepStatus.INTERRUPTED).update(status=StepStatus.NOT_STARTED, result=None)
    ask_timeout_cancel(plan_id=plan.pk)  # answered (or timed out): an in-process timer has nothing left to do
    plan_log(plan=plan, kind=LogKind.STATE, data={"status": plan.status, "event": "resumed", "userQuery": user_query})
    return plan


def plan_set_status(*, plan: Plan, status: str) -> None:
    plan.status = status
    plan.save(update_fields=["status", "updated_at"])
    plan_log(plan=plan, kind=LogKind.STATE, data={"status": status})


def step_update(*, step: PlanStep, status: str, result: dict[str, Any] | None = None) -> None:
    step.status = status
    fields = ["status"]
    if result is not None:
        step.result = result
        fields.append("result")
    step.save(update_fields=fields)
    plan_log(plan=step.plan, kind=LogKind.STATE, step=step.seqNo, data={"status": status, "result": result})

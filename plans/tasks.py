"""The ask-user timeout (seed 3): resume an interrupted plan with a no-reply message when the user stays silent."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from celery import shared_task

NO_REPLY = "用户暂未回复 / the user has not replied"


class _Silent:
    async def emit(self, frame: dict) -> dict:
        return frame


@shared_task(name="plans.ask_timeout")
def plan_ask_timeout(plan_id: int, interrupted_at: str | None = None) -> bool:
    """Resume the plan with NO_REPLY if it is still interrupted (and not interrupted again since)."""
    from memory.services import message_add
    from plans.models import Plan, PlanStatus
    from plans.planner import run_planner_turn
    from tenants.scope import all_tenants, tenant_scope

    with all_tenants(reason="plan ask timeout"):
        plan = Plan.objects.select_related("conversation__tenant").filter(pk=plan_id).first()
    if plan is None or plan.status != PlanStatus.INTERRUPTED:
        return False
    if interrupted_at and plan.updated_at.isoformat() != interrupted_at:
        return False
    conversation = plan.conversation
    with tenant_scope(conversation.tenant):
        message = message_add(conversation=conversation, role="user", content=NO_REPLY)
        async_to_sync(run_planner_turn)(conversation=conversation, user_message=message, sink=_Silent())
    return True

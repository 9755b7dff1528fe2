"""The ask-user timeout (seed 3): resume an interrupted plan with a no-reply message when the user stays silent.

With a broker (CELERY_TASK_ALWAYS_EAGER off) the timeout is a Celery task with a countdown, run by a worker. In
eager mode (the embedded default: one process, no broker) a countdown task would run at once, so the timeout runs
on a timer thread of this process instead; a restart of the process loses the timer (the plan then waits for the
user's next message). Either way, a reply of the user first resumes the plan and the timeout then does nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import async_to_sync
from celery import shared_task

from agents.asktimer import AskTimer
from core.conf import setting
from core.registry import Slot
from plans.models import Plan, PlanStatus
from tenants.scope import all_tenants, tenant_scope

NO_REPLY = "用户暂未回复 / the user has not replied"

# Eager mode: plan id -> its pending timer (cancelled when the plan resumes, replaced when it asks again).
ask_timer = AskTimer(task_name="plans.ask_timeout", label="plan")


# The surface that runs a turn the server starts (engine.turns.run_server_turn, registered by the engine app): it
# claims the conversation like a typed message would and streams the frames.
ServerTurn = Callable[..., Awaitable[bool]]
_server_turn: Slot[ServerTurn] = Slot(
    "the server-turn runner (plans.tasks)", filled_by="the engine app (engine.apps.EngineConfig)"
)


def register_server_turn(runner: ServerTurn) -> None:
    _server_turn.register(runner)


@shared_task(name=ask_timer.task_name)
def plan_ask_timeout(plan_id: int, interrupted_at: str | None = None) -> bool:
    """Resume the plan with NO_REPLY if it is still interrupted (and not interrupted again since)."""

    with all_tenants(reason="plan ask timeout"):
        plan = Plan.objects.select_related("conversation__tenant").filter(pk=plan_id).first()
    if plan is None or plan.status != PlanStatus.INTERRUPTED:
        return False
    if interrupted_at and plan.updated_at.isoformat() != interrupted_at:
        return False
    conversation = plan.conversation
    with tenant_scope(conversation.tenant):
        return async_to_sync(_server_turn.get())(conversation=conversation, content=NO_REPLY)


def ask_timeout_seconds() -> float:
    return float(setting("PLAN_ASK_TIMEOUT_SECONDS"))


def ask_timeout_schedule(*, plan_id: int, interrupted_at: str) -> str:
    """Schedule the no-reply resume of an interrupted plan; returns where it waits: "celery", "process" or "off"
    (PLAN_ASK_TIMEOUT_SECONDS <= 0, or eager mode with PLAN_ASK_TIMEOUT_IN_PROCESS off)."""
    countdown = ask_timeout_seconds()
    if countdown <= 0:
        return "off"
    return ask_timer.schedule(plan_id, args=(plan_id, interrupted_at), seconds=countdown,
                              in_process=bool(setting("PLAN_ASK_TIMEOUT_IN_PROCESS")))  # fmt: skip


def ask_timeout_cancel(*, plan_id: int) -> bool:
    """Forget the in-process timer of a plan that resumed (the user answered); True if there was one."""
    return ask_timer.cancel(plan_id)

"""Celery tasks of goal runs. Each takes ids (the tenant's too) and runs in the tenant's scope (`tenant_task`)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from celery import shared_task

from agents.goal import dispatch
from agents.goal.loop import advance_run
from agents.goal.services import goal_run_ask_timed_out
from core.conf import setting
from tenants.taskscope import tenant_task


@shared_task(name=dispatch.RUN_TASK)
@tenant_task(gone=False)
def run_goal(tenant_id: int, run_id: int) -> bool:
    """Run GOAL_ITERATIONS_PER_TASK iterations of a goal run, then queue the next task if the run goes on (a
    worker is never held for a whole run, and a stop is seen between iterations). True when it queued one."""
    iterations = max(1, int(setting("GOAL_ITERATIONS_PER_TASK")))
    more = async_to_sync(advance_run)(run_id=run_id, iterations=iterations)
    if more:
        dispatch.queue_run(tenant_id=tenant_id, run_id=run_id)
    return more


@shared_task(name=dispatch.ASK_TIMEOUT_TASK)
@tenant_task(gone=False)
def goal_ask_timeout(tenant_id: int, run_id: int, asked_at: str) -> bool:
    """The question asked at `asked_at` waited its time: resume the run with "not replied" if it still waits."""
    return goal_run_ask_timed_out(run_id=run_id, asked_at=asked_at)

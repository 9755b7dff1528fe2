"""Celery task of evaluation runs: takes ids (the tenant's too), runs in the tenant's scope (`tenant_task`)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from celery import shared_task

from evals import runner
from tenants.taskscope import tenant_task


@shared_task(name=runner.RUN_TASK)
@tenant_task(gone=False)
def run(tenant_id: int, run_id: int) -> bool:
    """Run what is left of an evaluation run, on its own event loop (its cases' turns run side by side on it, at
    most the run's concurrency). True once it ended (its status says how)."""
    async_to_sync(runner.execute)(run_id, tenant_id)
    return True

"""Writes and reads of workflows and their runs. Views and the admin call these; the YAML is validated here."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from agents.models import Agent, Workflow, WorkflowRun, WorkflowRunStatus
from agents.workflows.schema import Workflow as WorkflowDocument
from agents.workflows.schema import WorkflowIssue, WorkflowValidationError, parse_workflow

if TYPE_CHECKING:
    from tenants.models import Tenant


def workflow_validate(*, yaml_text: str) -> WorkflowDocument:
    """The parsed document, or WorkflowValidationError naming step, field and line of each problem."""
    return parse_workflow(yaml_text)


def workflow_get(*, workflow_id: int) -> Workflow:
    """The workflow of the active tenant scope (Workflow.DoesNotExist for another tenant's id)."""
    return Workflow.objects.get(pk=workflow_id)


def workflow_list() -> list[Workflow]:
    return list(Workflow.objects.select_related("agent").order_by("name"))


@transaction.atomic
def workflow_save(
    *, tenant: Tenant, yaml_text: str, workflow: Workflow | None = None, agent: Agent | None = None
) -> Workflow:
    """Create (or update) a workflow from its YAML: validated first; name and description come from the document."""
    document = parse_workflow(yaml_text)
    name = document.name[:120]
    clash = Workflow.objects.filter(name=name).exclude(pk=workflow.pk if workflow else None).exists()
    if clash:
        raise WorkflowValidationError(
            [WorkflowIssue(_("Another workflow is already named “%(name)s”.") % {"name": name}, field="name")]
        )
    if workflow is None:
        workflow = Workflow(tenant=tenant)
    workflow.name = name
    workflow.description = document.description
    workflow.yaml = yaml_text
    if agent is not None:
        workflow.agent = agent
    try:
        with transaction.atomic():
            workflow.save()
    except IntegrityError:
        raise WorkflowValidationError(
            [WorkflowIssue(_("Another workflow is already named “%(name)s”.") % {"name": name}, field="name")]
        ) from None
    return workflow


def workflow_bind_agent(*, workflow: Workflow, agent: Agent | None) -> Workflow:
    """Make `agent` (a workflow agent) run `workflow`; an agent runs one workflow at most."""
    if agent is not None:
        Workflow.objects.filter(agent=agent).exclude(pk=workflow.pk).update(agent=None)
    workflow.agent = agent
    workflow.save(update_fields=["agent", "updated_at"])
    return workflow


def workflow_runs(*, workflow: Workflow, limit: int = 20) -> list[WorkflowRun]:
    return list(workflow.runs.order_by("-started_at", "-id")[:limit])


def workflow_run_get(*, workflow: Workflow, run_id: int) -> WorkflowRun:
    return workflow.runs.get(pk=run_id)


def workflow_run_record(
    *,
    workflow: Workflow,
    status: str,
    inputs: dict[str, Any],
    outputs: dict[str, Any],
    log: list[dict[str, Any]],
    error: str = "",
    conversation_id: int | None = None,
    duration_ms: float = 0,
) -> WorkflowRun:
    """Store one finished run with its per-step log."""
    return WorkflowRun.objects.create(
        tenant_id=workflow.tenant_id,
        workflow=workflow,
        conversation_id=conversation_id,
        status=status,
        inputs=inputs,
        outputs=outputs,
        log=log,
        error=error,
        duration_ms=duration_ms,
    )


async def workflow_execute(
    *,
    workflow: Workflow,
    tenant: Tenant,
    message: str = "",
    inputs: dict[str, Any] | None = None,
    conversation_id: int | None = None,
    agent_id: int | None = None,
    user_id: int | None = None,
    provider: Any = None,
    model: str | None = None,
    temperature: float | None = None,
    on_step: Any = None,
    document_yaml: str | None = None,
) -> tuple[WorkflowRun, Any]:
    """Run a stored workflow and record the run; returns (run row, WorkflowRunResult).

    `document_yaml` runs a frozen version of the document (an agent version's snapshot) instead of the current one.
    """
    from agents.workflows.runner import run_workflow
    from llm.client import database_sync_to_async

    started = time.perf_counter()
    document = parse_workflow(document_yaml or workflow.yaml)
    result = await run_workflow(
        document,
        tenant=tenant,
        message=message,
        inputs=inputs,
        provider=provider,
        model=model,
        temperature=temperature,
        agent_id=agent_id,
        conversation_id=conversation_id,
        user_id=user_id,
        on_step=on_step,
    )
    status = WorkflowRunStatus.COMPLETED if result.status == "completed" else WorkflowRunStatus.FAILED
    run = await database_sync_to_async(workflow_run_record)(
        workflow=workflow,
        status=status,
        inputs={"message": message, **(inputs or {})},
        outputs={"result": result.result, "text": result.text} if status == WorkflowRunStatus.COMPLETED else {},
        log=result.log,
        error=result.error,
        conversation_id=conversation_id,
        duration_ms=round((time.perf_counter() - started) * 1000, 1),
    )
    return run, result

"""Writes and reads of workflows and their runs. Views and the admin call these; the YAML is validated here."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils.translation import gettext as _

from agents.models import Agent, Workflow, WorkflowRun, WorkflowRunStatus
from agents.workflows.runner import WorkflowPause, WorkflowRunResult, run_workflow
from agents.workflows.schema import Workflow as WorkflowDocument
from agents.workflows.schema import WorkflowIssue, WorkflowValidationError, parse_workflow
from core.db import database_sync_to_async

if TYPE_CHECKING:
    from tenants.models import Tenant

# A run paused by an input or ask step (its question and state in outputs["pause"]). WorkflowRunStatus has no
# such choice yet (agents/models.py is not this module's); the column is free text, so the value is stored as is.
RUN_INTERRUPTED = WorkflowRunStatus.INTERRUPTED


def workflow_validate(*, yaml_text: str, tenant: Tenant) -> WorkflowDocument:
    """The parsed document, or WorkflowValidationError naming step, field and line of each problem (a tool
    `tenant` may not use is one)."""
    return parse_workflow(yaml_text, tenant=tenant)


def workflow_get(*, workflow_id: int) -> Workflow:
    """The workflow of the active tenant scope (Workflow.DoesNotExist for another tenant's id)."""
    return Workflow.objects.get(pk=workflow_id)


def workflow_list() -> list[Workflow]:
    return list(Workflow.objects.select_related("agent").order_by("name"))


@transaction.atomic
def workflow_save(
    *, tenant: Tenant, yaml_text: str, workflow: Workflow | None = None, agent: Agent | None = None
) -> Workflow:
    """Create (or update) a workflow from its YAML: validated first (in `tenant`: only tools it may use); name and
    description come from the document."""
    document = parse_workflow(yaml_text, tenant=tenant)
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


def workflow_runs_for(*, workflow: Workflow, user_id: int | None) -> QuerySet[WorkflowRun]:
    """The workflow's runs a reader may see, newest first: every run for administrators (`user_id` None), a member's
    own runs otherwise (a run's inputs and log hold what its user typed)."""
    runs = workflow.runs.order_by("-started_at", "-id")
    return runs if user_id is None else runs.filter(conversation__user_id=user_id)


def workflow_runs(*, workflow: Workflow, user_id: int | None, limit: int = 20) -> list[WorkflowRun]:
    return list(workflow_runs_for(workflow=workflow, user_id=user_id)[:limit])


def workflow_run_get(*, workflow: Workflow, run_id: int, user_id: int | None) -> WorkflowRun:
    return workflow_runs_for(workflow=workflow, user_id=user_id).get(pk=run_id)


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


def _run_status(result: WorkflowRunResult) -> str:
    return {
        "completed": WorkflowRunStatus.COMPLETED,
        "interrupted": RUN_INTERRUPTED,
        "stopped": WorkflowRunStatus.STOPPED,
    }.get(result.status, WorkflowRunStatus.FAILED)


def _run_outputs(result: WorkflowRunResult) -> dict[str, Any]:
    if result.status == "completed":
        return {"result": result.result, "text": result.text}
    if result.pause is not None:
        return {"pause": result.pause.as_dict()}
    return {}


async def workflow_execute(
    *,
    workflow: Workflow,
    tenant: Tenant,
    message: str = "",
    inputs: dict[str, Any] | None = None,
    conversation_id: int | None = None,
    document_yaml: str | None = None,
    context: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[WorkflowRun, WorkflowRunResult]:
    """Run a stored workflow and record the run; returns (run row, WorkflowRunResult).

    `document_yaml` runs a frozen version of the document (an agent version's snapshot) instead of the current one;
    `context` is the tool context the run starts from; `options` are run_workflow's (model, agent, user, on_step,
    stop...). A run that asks the user is stored "interrupted" with its pause (question, step, variables, tool
    context); `workflow_resume` goes on with it.
    """

    started = time.perf_counter()
    document = parse_workflow(document_yaml or workflow.yaml)
    result = await run_workflow(
        document,
        tenant=tenant,
        message=message,
        inputs=inputs,
        conversation_id=conversation_id,
        context=context,
        **options,
    )
    run = await database_sync_to_async(workflow_run_record)(
        workflow=workflow,
        status=_run_status(result),
        inputs={"message": message, **(inputs or {})},
        outputs=_run_outputs(result),
        log=result.log,
        error=result.error,
        conversation_id=conversation_id,
        duration_ms=round((time.perf_counter() - started) * 1000, 1),
    )
    return run, result


def workflow_paused_run(*, workflow: Workflow, conversation_id: int) -> WorkflowRun | None:
    """The conversation's run of `workflow` waiting for the user's answer (the newest), or None."""
    return (
        WorkflowRun.objects.filter(workflow=workflow, conversation_id=conversation_id, status=RUN_INTERRUPTED)
        .order_by("-id")
        .first()
    )


def _run_update(*, run: WorkflowRun, result: WorkflowRunResult, message: str, ms: float) -> WorkflowRun:
    run.status = _run_status(result)
    run.outputs = _run_outputs(result)
    run.log = [*(run.log or []), *result.log]
    run.error = result.error
    run.inputs = {**(run.inputs or {}), "answers": [*(run.inputs or {}).get("answers", []), message]}
    run.duration_ms = round((run.duration_ms or 0) + ms, 1)
    run.save(update_fields=["status", "outputs", "log", "error", "inputs", "duration_ms"])
    return run


async def workflow_resume(
    *, run: WorkflowRun, message: str, tenant: Tenant, document_yaml: str | None = None, **options: Any
) -> tuple[WorkflowRun, WorkflowRunResult]:
    """Go on with a paused run from the step that asked, `message` being the user's answer; the steps before it
    are not run again. The same run row is updated (its log grows, the answers are kept in its inputs). `options`
    are run_workflow's."""

    started = time.perf_counter()
    workflow = await database_sync_to_async(lambda: run.workflow)()
    document = parse_workflow(document_yaml or workflow.yaml)
    result = await run_workflow(
        document,
        tenant=tenant,
        message=message,
        conversation_id=run.conversation_id,
        resume=WorkflowPause.from_dict((run.outputs or {}).get("pause") or {}),
        **options,
    )
    ms = (time.perf_counter() - started) * 1000
    run = await database_sync_to_async(_run_update)(run=run, result=result, message=message, ms=ms)
    return run, result

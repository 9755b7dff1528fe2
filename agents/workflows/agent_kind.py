"""The workflow agent kind (A7): an agent of kind "workflow" answers a turn by running the workflow bound to it.

Frames: a `tool` frame per step (started, then completed or failed, named by the step id), the output step's
text streamed as deltas, a `step` frame with the result and the usual `done`. The reply is stored as the
assistant message and the run with its per-step log as a WorkflowRun. A failing step ends the run; its error is
the reply. An input or ask step that lacks a variable pauses the run: the question is the reply, the `step` frame's
status is "interrupted", and the conversation's next message answers it (the run goes on from that step).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents import frames
from agents.models import Workflow, WorkflowRun
from agents.runtime import TurnContext, TurnResult, TurnRunner, TurnStatus, register_runner
from agents.workflows.runner import WorkflowRunResult, result_text
from agents.workflows.schema import Step
from agents.workflows.services import workflow_execute, workflow_paused_run, workflow_resume
from core.db import database_sync_to_async
from llm import errors
from llm.errors import LLMError
from memory.services import conversation_tool_context_set
from tenants.navigation import HomeCard, register_card

STATUSES = {
    "completed": TurnStatus.COMPLETED,
    "interrupted": TurnStatus.INTERRUPTED,
    "failed": TurnStatus.FAILED,
}


def _workflow_and_paused_run(agent_id: int, conversation_id: int) -> tuple[Workflow | None, WorkflowRun | None]:
    workflow = Workflow.objects.filter(agent_id=agent_id).first()
    paused = workflow_paused_run(workflow=workflow, conversation_id=conversation_id) if workflow else None
    return workflow, paused


class WorkflowRunner(TurnRunner):
    kinds = ("workflow",)

    async def run(self, turn: TurnContext) -> TurnResult:
        workflow, paused = await database_sync_to_async(_workflow_and_paused_run)(
            turn.conversation.agent_id, turn.conversation.pk
        )
        if workflow is None:
            text = _("This workflow agent has no workflow yet: choose one in Agents > Workflows.")
            await turn.say(text)
            return await turn.finish(text, status=TurnStatus.FAILED, intent="workflow")

        async def on_step(step: Step, phase: str, entry: dict[str, Any]) -> None:
            frame = frames.Tool(index=turn.index, name=step.id, step_type=step.type,
                                tool=step.plugin or step.function or None, status=phase,
                                arguments=entry.get("inputs") or {})  # fmt: skip
            if phase != frames.ToolStatus.STARTED:
                result = result_text(entry.get("outputs") or {})[:500] if not entry["error"] else ""
                frame = replace(frame, result=result, error=entry["error"], ms=entry.get("ms"))
            keep_line(turn, frame)
            await turn.emit(frame)

        config = turn.config
        options: dict[str, Any] = {
            "tenant": turn.tenant,
            "agent_id": config.agent_id,
            "user_id": turn.user_id,
            "provider": config.provider,
            "model": config.model,
            "temperature": config.temperature,
            "max_tokens": config.max_reply_tokens,  # the llm steps ask nothing more: the cap is the limit
            "on_step": on_step,
            "document_yaml": config.workflow_yaml,
            "stop": turn.stop,
            "knowledge_base_ids": config.knowledge_base_ids,
        }
        if paused is not None:
            run, result = await workflow_resume(run=paused, message=turn.user_message.content, **options)
        else:
            run, result = await workflow_execute(
                workflow=workflow,
                message=turn.user_message.content,
                conversation_id=turn.conversation.pk,
                context=turn.tool_context,
                **options,
            )
        await database_sync_to_async(_keep_context)(turn, result)
        if result.status == "stopped":
            raise LLMError(errors.CANCELLED, partial_text=result.text)
        text = result.error if result.status == "failed" else result.text
        data: dict[str, Any] = {"workflow": workflow.name, "run_id": run.pk, "result": result.result}
        if result.pause is not None:
            data.update(question=result.pause.question, missing=result.pause.missing, step=result.pause.step)
        await turn.say(text)
        return await turn.finish(text, status=STATUSES[result.status], intent="workflow", data=data)


def keep_line(turn: TurnContext, frame: frames.Tool) -> None:
    """The step's progress line, kept with the reply (TurnContext.lines): one per step, its latest outcome, as the
    page shows it live (static/js/chat.js keys a step's line by its id)."""
    line = {"name": frame.name, "status": frame.status, "step_type": frame.step_type or "", "tool": frame.tool or ""}
    for index, kept in enumerate(turn.lines):
        if kept.get("name") == frame.name:
            turn.lines[index] = line
            return
    turn.lines.append(line)


def _keep_context(turn: TurnContext, result: WorkflowRunResult) -> None:
    """The run's tool context becomes the conversation's (A5): a plan's later steps read what its tools produced."""
    if result.context != turn.tool_context:
        turn.tool_context = {**turn.tool_context, **result.context}
        conversation_tool_context_set(conversation=turn.conversation, tool_context=turn.tool_context)


register_runner(WorkflowRunner())

# Imported from AgentsConfig.ready(): the home page also gets a card for the workflows.
register_card(
    HomeCard(
        key="workflows",
        title=gettext_lazy("Workflows"),
        description=gettext_lazy(
            "Workflows written in YAML: steps that ask the user, call tools and models, and their run logs."
        ),
        url_name="agents:workflows:list",
        order=25,
    )
)

"""The workflow agent kind (A7): an agent of kind "workflow" answers a turn by running the workflow bound to it.

Frames: a `tool` frame per step (started, then completed or failed, named by the step id), the output step's
text streamed as deltas, a `step` frame with the result and the usual `done`. The reply is stored as the
assistant message and the run with its per-step log as a WorkflowRun. A failing step ends the run; its error is
the reply. An input or ask step that lacks a variable pauses the run: the question is the reply, the `step` frame's
status is "interrupted", and the conversation's next message answers it (the run goes on from that step).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

import agents.workflows.functions  # noqa: F401  (registers the seed's plugins and functions)
from agents.models import Workflow, WorkflowRun
from agents.runtime import register_turn_runner
from agents.workflows.runner import result_text
from agents.workflows.schema import Step
from agents.workflows.services import workflow_execute, workflow_paused_run, workflow_resume
from llm.client import database_sync_to_async
from llm.selectors import default_provider
from memory.models import Conversation, ConversationContext, Message, MessageStatus
from memory.services import assistant_message_finish, conversation_tool_context_set
from tenants.navigation import HomeCard, register_card


@dataclass
class _Setup:
    workflow: Workflow | None
    provider: Any
    model: str
    temperature: float | None
    # The document the conversation's version froze (None: the workflow as it is now).
    document_yaml: str | None = None
    # The conversation's run waiting for the user's answer, if any: this turn's message answers it.
    paused: WorkflowRun | None = None
    tool_context: dict[str, Any] = field(default_factory=dict)


def _setup(conversation: Conversation) -> _Setup:
    version = conversation.version
    snapshot = version.snapshot if version is not None else conversation.agent.snapshot()
    tenant = conversation.tenant
    provider = conversation.provider or default_provider(tenant=tenant)
    model = conversation.model or snapshot.get("model") or (provider.default_chat_model if provider else "")
    temperature = snapshot.get("temperature")
    workflow = Workflow.objects.filter(agent_id=conversation.agent_id).first()
    paused = workflow_paused_run(workflow=workflow, conversation_id=conversation.pk) if workflow else None
    tool_context = (
        ConversationContext.objects.filter(conversation=conversation).values_list("tool_context", flat=True).first()
    )
    return _Setup(
        workflow=workflow,
        provider=provider,
        model=model,
        temperature=float(temperature) if temperature is not None else None,
        document_yaml=snapshot.get("workflow_yaml"),
        paused=paused,
        tool_context=tool_context if isinstance(tool_context, dict) else {},
    )


def _keep_context(conversation: Conversation, before: dict[str, Any], context: dict[str, Any]) -> None:
    """The run's tool context becomes the conversation's (A5): a plan's later steps read what its tools produced."""
    if context != before:
        conversation_tool_context_set(conversation=conversation, tool_context={**before, **context})


def _chunks(text: str, size: int = 16) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)] or [""]


async def run_workflow_turn(
    *,
    conversation: Conversation,
    user_message: Message,
    sink: Any,
    stop: asyncio.Event | None = None,
    index: int = 0,
) -> Message:
    """Answer `user_message` by running the agent's workflow; store and return the reply."""
    setup = await database_sync_to_async(_setup)(conversation)
    workflow = setup.workflow
    data: dict[str, Any] = {}
    if workflow is None:
        text = _("This workflow agent has no workflow yet: choose one in Agents > Workflows.")
        status = "failed"
    else:

        async def on_step(step: Step, phase: str, entry: dict[str, Any]) -> None:
            frame = {"type": "tool", "index": index, "name": step.id, "step_type": step.type, "status": phase,
                     "arguments": entry.get("inputs") or {}}  # fmt: skip
            if phase != "started":
                frame["result"] = result_text(entry.get("outputs") or {})[:500] if not entry["error"] else ""
                frame["error"] = entry["error"]
                frame["ms"] = entry.get("ms")
            await sink.emit(frame)

        common = {
            "tenant": conversation.tenant,
            "agent_id": conversation.agent_id,
            "user_id": conversation.user_id,
            "provider": setup.provider,
            "model": setup.model,
            "temperature": setup.temperature,
            "on_step": on_step,
            "document_yaml": setup.document_yaml,
        }
        if setup.paused is not None:
            run, result = await workflow_resume(run=setup.paused, message=user_message.content, **common)
        else:
            run, result = await workflow_execute(
                workflow=workflow,
                message=user_message.content,
                conversation_id=conversation.pk,
                context=setup.tool_context,
                **common,
            )
        await database_sync_to_async(_keep_context)(conversation, setup.tool_context, result.context)
        text = result.error if result.status == "failed" else result.text
        status = result.status
        data = {"workflow": workflow.name, "run_id": run.pk, "result": result.result}
        if result.pause is not None:
            data.update(question=result.pause.question, missing=result.pause.missing, step=result.pause.step)
    for piece in _chunks(text):
        await sink.emit({"type": "delta", "index": index, "content": piece})
    message = await database_sync_to_async(assistant_message_finish)(conversation=conversation, content=text)
    await sink.emit(
        {
            "type": "step",
            "index": index,
            "status": status,
            "agentChatResponse": {"content": text, "intent": "workflow", "data": data},
        }
    )
    await sink.emit(
        {
            "type": "done",
            "index": index,
            "message_id": message.pk,
            "status": MessageStatus.COMPLETE,
            "usage": {"prompt_tokens": 0, "completion_tokens": 0},
            "content": text,
            "strategy": None,
        }
    )
    return message


register_turn_runner("workflow", run_workflow_turn)

# Imported from AgentsConfig.ready(): the home page also gets a card for the workflows.
register_card(
    HomeCard(
        key="workflows",
        title=gettext_lazy("Workflows"),
        description=gettext_lazy("YAML workflows of input, plugin, llm, custom and output steps, and their run logs."),
        url_name="agents:workflows:list",
        order=25,
    )
)

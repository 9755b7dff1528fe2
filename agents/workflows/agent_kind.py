"""The workflow agent kind (A7): an agent of kind "workflow" answers a turn by running the workflow bound to it.

Frames: a `tool` frame per step (started, then completed or failed, named by the step id), the output step's
text streamed as deltas, a `step` frame with the result and the usual `done`. The reply is stored as the
assistant message and the run with its per-step log as a WorkflowRun. A failing step ends the run; its error is
the reply (a missing input reads as a question to the user).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

import agents.workflows.functions  # noqa: F401  (registers the seed's plugins and functions)
from agents.models import Workflow
from agents.runtime import register_turn_runner
from agents.workflows.runner import result_text
from agents.workflows.schema import Step
from agents.workflows.services import workflow_execute
from llm.client import database_sync_to_async
from llm.selectors import default_provider
from memory.models import Conversation, Message, MessageStatus
from memory.services import assistant_message_finish
from tenants.navigation import HomeCard, register_card


@dataclass
class _Setup:
    workflow: Workflow | None
    provider: Any
    model: str
    temperature: float | None
    # The document the conversation's version froze (None: the workflow as it is now).
    document_yaml: str | None = None


def _setup(conversation: Conversation) -> _Setup:
    version = conversation.version
    snapshot = version.snapshot if version is not None else conversation.agent.snapshot()
    tenant = conversation.tenant
    provider = conversation.provider or default_provider(tenant=tenant)
    model = conversation.model or snapshot.get("model") or (provider.default_chat_model if provider else "")
    temperature = snapshot.get("temperature")
    return _Setup(
        workflow=Workflow.objects.filter(agent_id=conversation.agent_id).first(),
        provider=provider,
        model=model,
        temperature=float(temperature) if temperature is not None else None,
        document_yaml=snapshot.get("workflow_yaml"),
    )


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

        run, result = await workflow_execute(
            workflow=workflow,
            tenant=conversation.tenant,
            message=user_message.content,
            conversation_id=conversation.pk,
            agent_id=conversation.agent_id,
            user_id=conversation.user_id,
            provider=setup.provider,
            model=setup.model,
            temperature=setup.temperature,
            on_step=on_step,
            document_yaml=setup.document_yaml,
        )
        text = result.text if result.status == "completed" else result.error
        status = "completed" if result.status == "completed" else "failed"
        data = {"workflow": workflow.name, "run_id": run.pk, "result": result.result}
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

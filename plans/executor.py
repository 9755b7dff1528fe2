"""The plan executor (P3-P6): runs a stored plan's steps in dependency order, interrupts and resumes, finalizes.

Each step's agent answers through agents.runtime.run_turn (its kind's runner: the tool loop for chat / ReAct), with
the plan turn's stop signal, in its own memory: a child memory.Conversation per (step agent, user, parent
conversation), linked by `Conversation.parent` (internal: never listed as the user's chat). That is seed 0's
{agentName}_{userId}_{conversationId} key, not tied to the plan, so a later plan of the same conversation finds
the agent's memory. The step's request is a JSON document with its requirement, the plan's userQuery and context,
and the AgentExecResults of the steps it depends on. A step's status comes from its TurnResult.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils.translation import gettext as _

from agents import frames
from agents.config import agent_config
from agents.models import Agent
from agents.runtime import TurnContext, TurnResult, TurnStatus, run_turn
from agents.services import conversation_start
from core import tracing
from core.conf import setting
from core.db import database_sync_to_async
from llm import errors
from llm.errors import LLMError
from llm.messages import ChatMessage
from llm.options import ChatRequest
from llm.selectors import model_for_tier
from memory.models import Conversation, ConversationContext, Message
from memory.services import conversation_tool_context_set, message_add
from plans import services, traces
from plans.models import LogKind, Plan, PlanStatus, PlanStep, StepRecord, StepStatus
from plans.tasks import ask_timeout_schedule, ask_timeout_seconds

MAX_OUTPUT_CHARS = 4000


def _concurrency() -> int:
    return int(setting("PLAN_MAX_CONCURRENCY"))


@dataclass(frozen=True)
class PlanOutcome:
    """How a run of the plan ended for now, and the text the user reads (the summary, or a step's question)."""

    status: str
    text: str

    @property
    def turn_status(self) -> TurnStatus:
        return {
            PlanStatus.COMPLETED: TurnStatus.COMPLETED,
            PlanStatus.INTERRUPTED: TurnStatus.INTERRUPTED,
            PlanStatus.STOPPED: TurnStatus.STOPPED,
        }.get(self.status, TurnStatus.FAILED)


# A step's turn result -> the step's status (P2).
STEP_STATUS = {
    TurnStatus.COMPLETED: StepStatus.COMPLETED,
    TurnStatus.INTERRUPTED: StepStatus.INTERRUPTED,
    TurnStatus.FAILED: StepStatus.FAILED,
    TurnStatus.STOPPED: StepStatus.STOPPED,
}


class _StepSink:
    """Forwards a step agent's deltas and tool frames (index = the step's seqNo) and logs its tool and model calls;
    the step's own step/done/error frames stay here: the executor reports the step from its TurnResult."""

    def __init__(self, sink: Any, seq: int, plan: Plan) -> None:
        self.sink = sink
        self.seq = seq
        self.plan = plan

    async def emit(self, frame: frames.Frame) -> frames.Logged:
        if isinstance(frame, frames.Done):
            await self._log(LogKind.MODEL_CALL, {"role": "step", "usage": frame.usage})
            return frames.Logged(None, frame)
        if isinstance(frame, frames.Step | frames.Error):
            return frames.Logged(None, frame)
        if isinstance(frame, frames.Tool) and frame.status != frames.ToolStatus.STARTED:
            await self._log(LogKind.TOOL_CALL, {"name": frame.name, "call_id": frame.call_id, "status": frame.status,
                                                "arguments": frame.arguments, "result": frame.result,
                                                "step_type": frame.step_type, "tool": frame.tool})  # fmt: skip
        return await self.sink.emit(frame)

    async def _log(self, kind: str, data: dict[str, Any]) -> None:
        """O1: every step agent's tool call (name, arguments, result) and model call goes to PlanLog."""
        await database_sync_to_async(services.plan_log)(plan=self.plan, kind=kind, step=self.seq, data=data)


def _child_conversation(parent: Conversation, agent_name: str) -> Conversation:
    agent = Agent.objects.get(tenant_id=parent.tenant_id, name=agent_name, active=True)
    title = f"plan:{parent.pk}"
    child = Conversation.objects.filter(agent=agent, user_id=parent.user_id, parent=parent).first()
    if child is not None:
        latest = agent.published_version()
        if latest is not None and child.version_id != latest.pk:
            # A step is new work: it runs the agent's newest published version (demo data re-seeded, an agent
            # edited and republished); the child conversation keeps the agent's memory.
            child.version = latest
            child.save(update_fields=["version"])
        return child
    child = conversation_start(agent=agent, user=parent.user, title=title, parent=parent)
    if not agent_config(agent=agent, version=child.version, provider=child.provider).model_is_own:
        # Step agents that name no model of their own run on the tenant's execution tier (seed 3).

        choice = model_for_tier(tenant=parent.tenant, tier="execution", provider=child.provider)
        if choice is not None and choice.model:
            child.provider, child.model = choice.provider, choice.model
            child.save(update_fields=["provider", "model"])
    return child


def _request(plan: Plan, step: PlanStep) -> str:
    results = {s.seqNo: s.result for s in plan.steps.filter(seqNo__in=step.depends_on or [])}
    return json.dumps(
        {
            "requirement": step.requirement,
            "userQuery": plan.userQuery,
            "context": plan.context or {},
            "dependencies": [{"seqNo": seq, "result": results.get(seq)} for seq in step.depends_on or []],
        },
        ensure_ascii=False,
    )


def _dependency_context(plan: Plan, step: PlanStep) -> dict[str, Any]:
    """The tool contexts of the steps this one depends on, merged in seqNo order (a later tool reads an earlier
    tool's result from ToolCallContext.context)."""
    merged: dict[str, Any] = {}
    for dep in plan.steps.filter(seqNo__in=step.depends_on or []).order_by("seqNo"):
        context = (dep.result or {}).get("context")
        if isinstance(context, dict):
            merged.update(context)
    return merged


def _prepare(plan: Plan, step: PlanStep) -> tuple[Conversation, Message]:
    services.step_update(step=step, status=StepStatus.IN_PROGRESS)
    child = _child_conversation(plan.conversation, step.agentName)
    inherited = _dependency_context(plan, step)
    if inherited:
        conversation_tool_context_set(conversation=child, tool_context={**_tool_context(child), **inherited})
    message = message_add(conversation=child, role="user", content=_request(plan, step))
    return child, message


def _result(step: PlanStep, text: str, status: str, context: dict[str, Any]) -> dict[str, Any]:
    record_id = str(uuid.uuid4())
    output = text
    if len(text) > MAX_OUTPUT_CHARS:
        record = StepRecord.objects.create(tenant_id=step.tenant_id, step=step, content=text)
        record_id = str(record.recordId)
        output = text[:MAX_OUTPUT_CHARS]
    return {"recordId": record_id, "output": output, "status": status, "context": context}


def _tool_context(child: Conversation) -> dict[str, Any]:
    value = ConversationContext.objects.filter(conversation=child).values_list("tool_context", flat=True).first()
    return value if isinstance(value, dict) else {}


def _report_file(step: PlanStep, child: Conversation, context: dict[str, Any]) -> dict[str, Any]:
    """A report a step's tool wrote (context "report_markdown"/"title") stored as a StepRecord file: the result
    gets {recordId, url, title} (a link on the step card) and its context keeps the record id, not the text."""

    title = str(context.get("title") or _("Report"))
    record = StepRecord.objects.create(
        tenant_id=step.tenant_id, step=step, content=context["report_markdown"], content_type="text/markdown"
    )
    record_id = str(record.recordId)
    slim = {key: value for key, value in context.items() if key != "report_markdown"}
    conversation_tool_context_set(conversation=child, tool_context=slim)
    url = reverse("plans:record", kwargs={"record_id": record_id})
    return {"recordId": record_id, "url": url, "title": title, "context": {**slim, "report_record": record_id}}


def _finish_step(step: PlanStep, child: Conversation, reply: TurnResult) -> dict[str, Any]:
    status = STEP_STATUS[reply.status]
    text = reply.message.content or (errors.message_for(reply.error_code) if reply.error_code else "")
    context = _tool_context(child)
    result = _result(step, text, status, context)
    if status == StepStatus.COMPLETED and isinstance(context.get("report_markdown"), str):
        result.update(_report_file(step, child, context))
    services.step_update(step=step, status=status, result=result)
    return result


def _load(plan_id: int) -> tuple[Plan, list[PlanStep]]:
    plan = Plan.objects.select_related("conversation__user", "conversation__tenant").get(pk=plan_id)
    return plan, list(plan.steps.order_by("seqNo"))


def _snapshot(plan_id: int) -> dict[str, Any]:
    return Plan.objects.get(pk=plan_id).as_execution_plan()


def _log_snapshot(plan: Plan, step: PlanStep, moment: str) -> None:
    """O1: the whole plan's state before and after every step."""
    data = {"event": f"{moment}_step", "plan": _snapshot(plan.pk)}
    services.plan_log(plan=plan, kind=LogKind.STATE, step=step.seqNo, data=data)


async def _plan_frame(turn: TurnContext, plan_id: int) -> None:
    plan = await database_sync_to_async(_snapshot)(plan_id)
    await turn.emit(frames.Plan(index=turn.index, plan=plan))


@tracing.traced(traces.step_name, before=traces.step_attributes, after=traces.step_result)
async def _run_step(plan: Plan, step: PlanStep, turn: TurnContext) -> dict[str, Any]:
    await database_sync_to_async(_log_snapshot)(plan, step, "before")
    child, message = await database_sync_to_async(_prepare)(plan, step)
    await _plan_frame(turn, plan.pk)
    reply = await run_turn(
        conversation=child, user_message=message, sink=_StepSink(turn.sink, step.seqNo, plan), stop=turn.stop,
        index=step.seqNo,
    )  # fmt: skip
    turn.count(reply.usage.prompt_tokens, reply.usage.completion_tokens)
    result = await database_sync_to_async(_finish_step)(step, child, reply)
    await database_sync_to_async(_log_snapshot)(plan, step, "after")
    await turn.emit(
        frames.Step.response(index=step.seqNo, status=result["status"], content=result["output"], intent="plan_step",
                             data=result, agent_name=step.agentName)
    )  # fmt: skip
    await _plan_frame(turn, plan.pk)
    return result


async def execute(*, plan_id: int, turn: TurnContext) -> PlanOutcome:
    """Run the plan's runnable steps until it completes, fails, is interrupted or stopped (the turn's stop signal
    reaches the running step). A model error of the finalizer, or Stop, ends the plan (failed / stopped) and is
    raised as LLMError for the turn to report, with what the user should still read as its partial text."""
    try:
        return await _execute(plan_id, turn)
    except LLMError as exc:
        status = PlanStatus.STOPPED if exc.code == errors.CANCELLED else PlanStatus.FAILED
        plan = await database_sync_to_async(Plan.objects.get)(pk=plan_id)
        await database_sync_to_async(services.plan_set_status)(plan=plan, status=status)
        await _plan_frame(turn, plan_id)
        raise


async def _execute(plan_id: int, turn: TurnContext) -> PlanOutcome:
    plan, _steps = await database_sync_to_async(_load)(plan_id)
    limit = asyncio.Semaphore(_concurrency() if plan.allow_concurrency else 1)

    async def guarded(step: PlanStep) -> dict[str, Any]:
        async with limit:
            return await _run_step(plan, step, turn)

    await _plan_frame(turn, plan_id)
    while True:
        if turn.stopped:
            raise LLMError(errors.CANCELLED)
        plan, steps = await database_sync_to_async(_load)(plan_id)
        done = {step.seqNo for step in steps if step.status == StepStatus.COMPLETED}
        ready = [s for s in steps if s.status == StepStatus.NOT_STARTED and set(s.depends_on or []) <= done]
        if not ready:
            break
        batch = ready if plan.allow_concurrency else ready[:1]
        results = await asyncio.gather(*(guarded(step) for step in batch))
        pairs = list(zip(batch, results, strict=True))
        stopped = next((r for _s, r in pairs if r["status"] == StepStatus.STOPPED), None)
        if stopped is not None:
            raise LLMError(errors.CANCELLED, partial_text=str(stopped.get("output") or ""))
        failed = next(((s, r) for s, r in pairs if r["status"] == StepStatus.FAILED), None)
        if failed is not None:
            await database_sync_to_async(services.plan_set_status)(plan=plan, status=PlanStatus.FAILED)
            await _plan_frame(turn, plan_id)
            return PlanOutcome(PlanStatus.FAILED, await finalize(plan_id=plan_id, turn=turn, failed=failed))
        asked = next(((s, r) for s, r in pairs if r["status"] == StepStatus.INTERRUPTED), None)
        if asked is not None:
            await database_sync_to_async(_interrupt)(plan)
            await _plan_frame(turn, plan_id)
            return PlanOutcome(PlanStatus.INTERRUPTED, asked[1]["output"])
    if any(step.status != StepStatus.COMPLETED for step in steps):
        await database_sync_to_async(services.plan_set_status)(plan=plan, status=PlanStatus.FAILED)
        await _plan_frame(turn, plan_id)
        return PlanOutcome(PlanStatus.FAILED, _("The plan could not finish: some steps never became runnable."))
    text = await finalize(plan_id=plan_id, turn=turn)
    await database_sync_to_async(services.plan_set_status)(plan=plan, status=PlanStatus.COMPLETED)
    await _plan_frame(turn, plan_id)
    return PlanOutcome(PlanStatus.COMPLETED, text)


def _interrupt(plan: Plan) -> None:
    services.plan_set_status(plan=plan, status=PlanStatus.INTERRUPTED)
    mode = ask_timeout_schedule(plan_id=plan.pk, interrupted_at=plan.updated_at.isoformat())
    services.plan_log(plan=plan, kind=LogKind.STATE, data={"event": "ask_timeout", "where": mode,
                                                           "seconds": ask_timeout_seconds()})  # fmt: skip


def _finalizer_setup(plan_id: int) -> tuple[Plan, Any, str, list[dict[str, Any]]]:
    plan = Plan.objects.select_related("conversation__tenant", "conversation__provider").get(pk=plan_id)
    choice = model_for_tier(tenant=plan.conversation.tenant, tier="planning", provider=plan.conversation.provider)
    return plan, choice, plan.userQuery, [step.as_dict() for step in plan.steps.order_by("seqNo")]


async def finalize(*, plan_id: int, turn: TurnContext, failed: tuple[PlanStep, dict[str, Any]] | None = None) -> str:
    """Summarise the step results for the user in one model call (P6); a failed step is named with its reason. A
    model error is raised with the step outputs as its partial text (the user still reads what the steps found)."""
    plan, choice, query, steps = await database_sync_to_async(_finalizer_setup)(plan_id)
    if failed is not None:
        step, result = failed
        note = _("Step %(seq)s (%(agent)s) failed: %(reason)s") % {
            "seq": step.seqNo,
            "agent": step.agentName,
            "reason": result.get("output") or "",
        }
    else:
        note = ""
    if choice is None:
        return note or "\n\n".join(str((s.get("result") or {}).get("output") or "") for s in steps)
    instruction = (
        "Summarise the results of the plan's steps for the user, in the user's language. "
        "If a step failed, say which step failed and why."
    )
    payload = json.dumps({"userQuery": query, "steps": steps, "failure": note}, ensure_ascii=False)
    # The planning tier's model, as the planner's turn (whose own calls its longest reply does not bound).
    model = turn.model.on(choice.provider, choice.model)
    try:
        answer = await model.complete(
            ChatRequest(messages=[ChatMessage.system(instruction), ChatMessage.user(payload)])
        )
    except LLMError as exc:
        outputs = "\n\n".join(str((s.get("result") or {}).get("output") or "") for s in steps)
        raise LLMError(exc.code, exc.message, detail=exc.detail, partial_text=note or outputs) from exc
    turn.count(answer.usage.prompt_tokens, answer.usage.completion_tokens, answer.call_id)
    await database_sync_to_async(services.plan_log)(
        plan=plan, kind=LogKind.MODEL_CALL, data={"role": "finalizer", "call_id": answer.call_id}
    )
    summary = answer.text.strip()
    return f"{note}\n\n{summary}".strip() if note else summary or note

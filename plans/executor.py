"""The plan executor (P3-P6): runs a stored plan's steps in dependency order, interrupts and resumes, finalizes.

Each step's agent answers through agents.runtime.run_turn (its kind's runner: the tool loop for chat / ReAct) in
its own memory: a child memory.Conversation per (step agent, user, parent conversation), titled
`plan:<parent conversation id>` — seed 0's {agentName}_{userId}_{conversationId} key, not tied to the plan, so a
later plan of the same conversation finds the agent's memory. The step's request is a JSON document with its
requirement, the plan's userQuery and context, and the AgentExecResults of the steps it depends on.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from llm.client import complete_chat, database_sync_to_async
from memory.models import Conversation, Message, Role
from plans import services
from plans.models import LogKind, Plan, PlanStatus, PlanStep, StepRecord, StepStatus

MAX_OUTPUT_CHARS = 4000


def _concurrency() -> int:
    return int(getattr(settings, "PLAN_MAX_CONCURRENCY", 4))


class _StepSink:
    """Forwards a step agent's deltas and tool frames with index = seqNo; keeps its own step/done/error frames."""

    def __init__(self, sink: Any, seq: int, plan: Plan | None = None) -> None:
        self.sink = sink
        self.seq = seq
        self.plan = plan
        self.status: str | None = None
        self.error: str | None = None

    async def emit(self, frame: dict[str, Any]) -> dict[str, Any]:
        kind = frame.get("type")
        if kind == "step":
            self.status = frame.get("status")
            return frame
        if kind == "done":
            await self._log(LogKind.MODEL_CALL, {"role": "step", "usage": frame.get("usage") or {}})
            return frame
        if kind == "error":
            self.error = frame.get("message") or frame.get("code")
            return frame
        if kind == "tool" and frame.get("status") != "started":
            data = {key: frame.get(key) for key in ("name", "call_id", "status", "arguments", "result")}
            await self._log(LogKind.TOOL_CALL, data)
        return await self.sink.emit({**frame, "index": self.seq})

    async def _log(self, kind: str, data: dict[str, Any]) -> None:
        """O1: every step agent's tool call (name, arguments, result) and model call goes to PlanLog."""
        if self.plan is not None:
            await database_sync_to_async(services.plan_log)(plan=self.plan, kind=kind, step=self.seq, data=data)


def _child_conversation(parent: Conversation, agent_name: str) -> Conversation:
    from agents.models import Agent
    from memory.services import conversation_start

    agent = Agent.objects.get(tenant_id=parent.tenant_id, name=agent_name, active=True)
    title = f"plan:{parent.pk}"
    child = Conversation.objects.filter(agent=agent, user_id=parent.user_id, title=title).first()
    if child is not None:
        latest = agent.published_version()
        if latest is not None and child.version_id != latest.pk:
            # A step is new work: it runs the agent's newest published version (demo data re-seeded, an agent
            # edited and republished); the child conversation keeps the agent's memory.
            child.version = latest
            child.save(update_fields=["version"])
        return child
    child = conversation_start(agent=agent, user=parent.user, title=title)
    version = child.version
    snapshot = version.snapshot if version is not None else agent.snapshot()
    if not snapshot.get("model"):
        # Step agents that name no model of their own run on the tenant's execution tier (seed 3).
        from llm.selectors import model_for_tier

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
    from memory.services import conversation_tool_context_set, message_add

    services.step_update(step=step, status=StepStatus.IN_PROGRESS)
    child = _child_conversation(plan.conversation, step.agentName)
    inherited = _dependency_context(plan, step)
    if inherited:
        conversation_tool_context_set(conversation=child, tool_context={**_tool_context(child), **inherited})
    message = message_add(conversation=child, role="user", content=_request(plan, step))
    return child, message


def _asked(child: Conversation, reply: Message) -> bool:
    """The reply was written by the platform after a tool asked the user (no model call after the tool results)."""
    rows = list(Message.objects.filter(conversation=child, id__lt=reply.pk).order_by("-id")[:10])
    if not rows or rows[0].role != Role.TOOL:
        return False
    call = next((row for row in rows if row.role == Role.ASSISTANT and row.tool_calls), None)
    return call is not None and (call.usage or {}) == (reply.usage or {})


def _result(step: PlanStep, text: str, status: str, context: dict[str, Any]) -> dict[str, Any]:
    record_id = str(uuid.uuid4())
    output = text
    if len(text) > MAX_OUTPUT_CHARS:
        record = StepRecord.objects.create(tenant_id=step.tenant_id, step=step, content=text)
        record_id = str(record.recordId)
        output = text[:MAX_OUTPUT_CHARS]
    return {"recordId": record_id, "output": output, "status": status, "context": context}


def _tool_context(child: Conversation) -> dict[str, Any]:
    from memory.models import ConversationContext

    value = ConversationContext.objects.filter(conversation=child).values_list("tool_context", flat=True).first()
    return value if isinstance(value, dict) else {}


def _report_file(step: PlanStep, child: Conversation, context: dict[str, Any]) -> dict[str, Any]:
    """A report a step's tool wrote (context "report_markdown"/"title") stored as a StepRecord file: the result
    gets {recordId, url, title} (a link on the step card) and its context keeps the record id, not the text."""
    from django.urls import reverse

    from memory.services import conversation_tool_context_set

    title = str(context.get("title") or _("Report"))
    record = StepRecord.objects.create(
        tenant_id=step.tenant_id, step=step, content=context["report_markdown"], content_type="text/markdown"
    )
    record_id = str(record.recordId)
    slim = {key: value for key, value in context.items() if key != "report_markdown"}
    conversation_tool_context_set(conversation=child, tool_context=slim)
    url = reverse("plans:record", kwargs={"record_id": record_id})
    return {"recordId": record_id, "url": url, "title": title, "context": {**slim, "report_record": record_id}}


def _finish_step(step: PlanStep, child: Conversation, reply: Message, sink: _StepSink) -> dict[str, Any]:
    if sink.error or reply.error_code or sink.status == StepStatus.FAILED:
        status = StepStatus.FAILED
    elif sink.status == "interrupted" or _asked(child, reply):
        status = StepStatus.INTERRUPTED
    else:
        status = StepStatus.COMPLETED
    text = reply.content or sink.error or ""
    context = _tool_context(child)
    result = _result(step, text, status, context)
    if status == StepStatus.COMPLETED and isinstance(context.get("report_markdown"), str):
        result.update(_report_file(step, child, context))
    if status == StepStatus.FAILED and not text:
        result["output"] = sink.error or reply.error_code
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


async def _plan_frame(sink: Any, plan_id: int, index: int) -> None:
    await sink.emit({"type": "plan", "index": index, "plan": await database_sync_to_async(_snapshot)(plan_id)})


async def _run_step(plan: Plan, step: PlanStep, sink: Any, index: int) -> dict[str, Any]:
    from agents.runtime import run_turn

    await database_sync_to_async(_log_snapshot)(plan, step, "before")
    child, message = await database_sync_to_async(_prepare)(plan, step)
    await _plan_frame(sink, plan.pk, index)
    step_sink = _StepSink(sink, step.seqNo, plan)
    reply = await run_turn(conversation=child, user_message=message, sink=step_sink, index=step.seqNo)
    result = await database_sync_to_async(_finish_step)(step, child, reply, step_sink)
    await database_sync_to_async(_log_snapshot)(plan, step, "after")
    await sink.emit(
        {
            "type": "step",
            "index": step.seqNo,
            "status": result["status"],
            "agentName": step.agentName,
            "agentChatResponse": {"content": result["output"], "intent": "plan_step", "data": result},
        }
    )
    await _plan_frame(sink, plan.pk, index)
    return result


async def execute(*, plan_id: int, sink: Any, index: int = 0) -> tuple[str, str]:
    """Run the plan's runnable steps until it completes, fails or is interrupted; returns (status, reply text)."""
    plan, _steps = await database_sync_to_async(_load)(plan_id)
    limit = asyncio.Semaphore(_concurrency() if plan.allow_concurrency else 1)

    async def guarded(step: PlanStep) -> dict[str, Any]:
        async with limit:
            return await _run_step(plan, step, sink, index)

    await _plan_frame(sink, plan_id, index)
    while True:
        plan, steps = await database_sync_to_async(_load)(plan_id)
        done = {step.seqNo for step in steps if step.status == StepStatus.COMPLETED}
        ready = [s for s in steps if s.status == StepStatus.NOT_STARTED and set(s.depends_on or []) <= done]
        if not ready:
            break
        batch = ready if plan.allow_concurrency else ready[:1]
        results = await asyncio.gather(*(guarded(step) for step in batch))
        pairs = list(zip(batch, results, strict=True))
        failed = next(((s, r) for s, r in pairs if r["status"] == StepStatus.FAILED), None)
        if failed is not None:
            await database_sync_to_async(services.plan_set_status)(plan=plan, status=PlanStatus.FAILED)
            await _plan_frame(sink, plan_id, index)
            return PlanStatus.FAILED, await finalize(plan_id=plan_id, failed=failed)
        asked = next(((s, r) for s, r in pairs if r["status"] == StepStatus.INTERRUPTED), None)
        if asked is not None:
            await database_sync_to_async(_interrupt)(plan)
            await _plan_frame(sink, plan_id, index)
            return PlanStatus.INTERRUPTED, asked[1]["output"]
    if any(step.status != StepStatus.COMPLETED for step in steps):
        await database_sync_to_async(services.plan_set_status)(plan=plan, status=PlanStatus.FAILED)
        await _plan_frame(sink, plan_id, index)
        return PlanStatus.FAILED, _("The plan could not finish: some steps never became runnable.")
    text = await finalize(plan_id=plan_id)
    await database_sync_to_async(services.plan_set_status)(plan=plan, status=PlanStatus.COMPLETED)
    await _plan_frame(sink, plan_id, index)
    return PlanStatus.COMPLETED, text


def _interrupt(plan: Plan) -> None:
    from plans.tasks import ask_timeout_schedule, ask_timeout_seconds

    services.plan_set_status(plan=plan, status=PlanStatus.INTERRUPTED)
    mode = ask_timeout_schedule(plan_id=plan.pk, interrupted_at=plan.updated_at.isoformat())
    services.plan_log(plan=plan, kind=LogKind.STATE, data={"event": "ask_timeout", "where": mode,
                                                           "seconds": ask_timeout_seconds()})  # fmt: skip


def _finalizer_setup(plan_id: int) -> tuple[Plan, Any, str, list[dict[str, Any]]]:
    from llm.selectors import model_for_tier

    plan = Plan.objects.select_related("conversation__tenant", "conversation__provider").get(pk=plan_id)
    choice = model_for_tier(tenant=plan.conversation.tenant, tier="planning", provider=plan.conversation.provider)
    return plan, choice, plan.userQuery, [step.as_dict() for step in plan.steps.order_by("seqNo")]


async def finalize(*, plan_id: int, failed: tuple[PlanStep, dict[str, Any]] | None = None) -> str:
    """Summarise the step results for the user in one model call (P6); a failed step is named with its reason."""
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
    text = note
    if choice is not None:
        instruction = (
            "Summarise the results of the plan's steps for the user, in the user's language. "
            "If a step failed, say which step failed and why."
        )
        payload = json.dumps({"userQuery": query, "steps": steps, "failure": note}, ensure_ascii=False)
        try:
            answer = await complete_chat(
                tenant=plan.conversation.tenant,
                provider=choice.provider,
                model=choice.model,
                messages=[{"role": "system", "content": instruction}, {"role": "user", "content": payload}],
                conversation_id=plan.conversation_id,
                agent_id=plan.conversation.agent_id,
            )
            summary = answer.text.strip()
            await database_sync_to_async(services.plan_log)(
                plan=plan, kind=LogKind.MODEL_CALL, data={"role": "finalizer", "call_id": answer.call_id}
            )
            text = f"{note}\n\n{summary}".strip() if note else summary or note
        except Exception:
            text = note or "\n\n".join(str((s.get("result") or {}).get("output") or "") for s in steps)
    return text

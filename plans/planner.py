"""The planner agent kind (P1): the planning-tier model with two tools, list agents and create plan.

An interrupted plan of the conversation is resumed first (P5): the user's message becomes its userQuery. Otherwise
the model plans: an invalid plan goes back to it as the tool result (at most PLAN_MAX_RETRIES repairs), a text
answer without a plan is the direct reply. A valid plan runs through plans.executor. The planner's model calls
count in the turn's usage; a model error ends the turn failed with one error frame (agents.runtime.TurnRunner).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from agents.runtime import TurnContext, TurnResult, TurnRunner, TurnStatus, register_runner
from agents.toolloop import no_provider
from core.db import database_sync_to_async
from llm.client import ToolCall
from llm.messages import ChatMessage
from llm.options import ChatRequest
from llm.selectors import TierChoice, model_for_tier
from memory.models import Conversation
from memory.services import context_build
from plans import executor, services
from plans.models import LogKind, Plan

MAX_RETRIES = 2
MAX_ROUNDS = 6

LIST_AGENTS = {
    "type": "function",
    "function": {
        "name": "list_agents",
        "description": "List the agents that can execute plan steps, with what each is good at.",
        "parameters": {"type": "object", "properties": {}},
    },
}
CREATE_PLAN = {
    "type": "function",
    "function": {
        "name": "create_plan",
        "description": "Create the execution plan: a name and steps, each run by one listed agent.",
        "parameters": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "seqNo": {"type": "integer", "minimum": 1, "description": "1, 2, 3, ... (unique)"},
                            "agentName": {"type": "string"},
                            "requirement": {"type": "string"},
                            "depends_on": {"type": "array", "items": {"type": "integer"}},
                        },
                        "required": ["seqNo", "agentName", "requirement"],
                    },
                },
                "allow_concurrency": {
                    "type": "boolean",
                    "default": False,
                    "description": "Run steps whose dependencies are done at the same time.",
                },
            },
            "required": ["name", "steps"],
        },
    },
}
PLANNER_PROMPT = (
    "You are a planner. Call list_agents to see the available agents, then call create_plan with steps that each "
    "give one agent a clear requirement, numbered from 1 (seqNo); depends_on lists the seqNo of steps whose "
    "results a step needs. "
    "If the request needs no agents, answer directly in text."
)


@dataclass(frozen=True)
class _Setup:
    choice: TierChoice | None
    messages: list[ChatMessage]
    # The conversation's interrupted plan: this turn's message answers its question (P5).
    resume: Plan | None


def _setup(conversation: Conversation, system_prompt: str) -> _Setup:
    choice = model_for_tier(tenant=conversation.tenant, tier="planning", provider=conversation.provider)
    prompt = "\n\n".join(part for part in (system_prompt, PLANNER_PROMPT) if part)
    built = context_build(conversation=conversation, system_prompt=prompt, model=choice.model if choice else "")
    return _Setup(choice=choice, messages=built.messages, resume=services.interrupted_plan(conversation=conversation))


class PlannerRunner(TurnRunner):
    kinds = ("planner",)

    async def run(self, turn: TurnContext) -> TurnResult:
        setup = await database_sync_to_async(_setup)(turn.conversation, turn.config.system_prompt)
        if setup.resume is not None:
            plan = setup.resume
            await database_sync_to_async(services.plan_resume)(plan=plan, user_query=turn.user_message.content)
            return await _run_plan(turn, plan)
        if setup.choice is None:
            raise no_provider()
        return await _Planning(turn, setup.choice, list(setup.messages)).run()


class _Planning:
    """The planner model's rounds: list agents, create a plan (repaired at most MAX_RETRIES times), or answer."""

    def __init__(self, turn: TurnContext, choice: TierChoice, messages: list[ChatMessage]) -> None:
        self.turn = turn
        self.choice = choice
        self.messages = messages
        self.calls: list[dict[str, Any]] = []
        self.retries = 0

    async def run(self) -> TurnResult:
        turn = self.turn
        # The planning tier's model, as this turn's agent (not bounded by its longest reply: agents.modelcall).
        model = turn.model.on(self.choice.provider, self.choice.model)
        for _round in range(MAX_ROUNDS):
            answer = await model.complete(ChatRequest(messages=self.messages, tools=(LIST_AGENTS, CREATE_PLAN)))
            turn.count(answer.usage.prompt_tokens, answer.usage.completion_tokens, answer.call_id)
            self.calls.append({"call_id": answer.call_id, "tool_calls": [c.name for c in answer.tool_calls]})
            if not answer.tool_calls:
                await turn.say(answer.text)
                return await turn.finish(answer.text, intent="plan")
            parts = [c.as_message_part() if c.id else {**c.as_message_part(), "id": f"call_{uuid.uuid4().hex[:20]}"}
                     for c in answer.tool_calls]  # fmt: skip
            self.messages.append(ChatMessage.assistant(answer.text, tool_calls=parts))
            for call, part in zip(answer.tool_calls, parts, strict=True):
                outcome = await self._tool(call)
                if isinstance(outcome, TurnResult):
                    return outcome
                self.messages.append(ChatMessage.tool(part["id"], outcome))
        return await self._give_up(_("The planner did not finish planning."))

    async def _tool(self, call: ToolCall) -> str | TurnResult:
        """The tool's answer to the planner model, or the turn's result once a plan ran (or planning gave up)."""
        turn = self.turn
        if call.name == "list_agents":
            rows = await database_sync_to_async(services.agents_available)(tenant=turn.tenant)
            return json.dumps(rows, ensure_ascii=False)
        if call.name != "create_plan":
            return f"Error: tool {call.name} is not available to the planner."
        arguments = call.parsed_arguments or {}
        steps = arguments.get("steps")
        problems = await database_sync_to_async(services.plan_problems)(tenant=turn.tenant, steps=steps)
        if not problems:
            plan = await database_sync_to_async(services.plan_create)(
                conversation=turn.conversation, name=str(arguments.get("name") or ""),
                user_query=turn.user_message.content, steps=steps,
                allow_concurrency=bool(arguments.get("allow_concurrency", False)),
            )  # fmt: skip
            for entry in self.calls:
                await database_sync_to_async(services.plan_log)(
                    plan=plan, kind=LogKind.MODEL_CALL, data={"role": "planner", **entry}
                )
            return await _run_plan(turn, plan)
        self.retries += 1
        if self.retries > MAX_RETRIES:
            return await self._give_up(
                _("The planner could not make a valid plan: %(problems)s") % {"problems": "; ".join(problems)}
            )
        return _("Invalid plan: %(problems)s") % {"problems": "; ".join(problems)}

    async def _give_up(self, text: str) -> TurnResult:
        await self.turn.say(text)
        return await self.turn.finish(text, status=TurnStatus.FAILED, intent="plan")


async def _run_plan(turn: TurnContext, plan: Plan) -> TurnResult:
    """Run (or resume) the plan; its outcome is the turn's: the finalizer's summary, or the question a step asks."""
    outcome = await executor.execute(plan_id=plan.pk, turn=turn)
    await turn.say(outcome.text)
    return await turn.finish(outcome.text, status=outcome.turn_status, intent="plan", data={"planId": str(plan.planId)})


register_runner(PlannerRunner())

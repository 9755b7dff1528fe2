"""The planner agent kind (P1): the planning-tier model with two tools, list agents and create plan.

An interrupted plan of the conversation is resumed first (P5): the user's message becomes its userQuery. Otherwise
the model plans: an invalid plan goes back to it as the tool result (at most PLAN_MAX_RETRIES repairs), a text
answer without a plan is the direct reply. A valid plan runs through plans.executor.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from django.utils.translation import gettext as _

from llm.client import complete_chat, database_sync_to_async
from memory.models import Conversation, Message, MessageStatus
from memory.services import assistant_message_finish
from plans import executor, services
from plans.models import LogKind

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


def _setup(conversation: Conversation) -> dict[str, Any]:
    from llm.selectors import model_for_tier
    from memory.services import context_build

    agent = conversation.agent
    tenant = conversation.tenant
    choice = model_for_tier(tenant=tenant, tier="planning", provider=conversation.provider)
    prompt = "\n\n".join(part for part in (agent.system_prompt, PLANNER_PROMPT) if part)
    model = choice.model if choice else ""
    messages = context_build(conversation=conversation, system_prompt=prompt, model=model).messages
    return {"tenant": tenant, "choice": choice, "messages": messages, "resume": services.interrupted_plan(
        conversation=conversation)}  # fmt: skip


async def _reply(conversation: Conversation, sink: Any, index: int, text: str, *, failed: bool = False) -> Message:
    for start in range(0, len(text), 16):
        await sink.emit({"type": "delta", "index": index, "content": text[start : start + 16]})
    message = await database_sync_to_async(assistant_message_finish)(conversation=conversation, content=text)
    await sink.emit(
        {"type": "done", "index": index, "message_id": message.pk, "status": MessageStatus.COMPLETE,
         "usage": {"prompt_tokens": 0, "completion_tokens": 0}, "content": text, "strategy": None}
    )  # fmt: skip
    return message


async def run_planner_turn(
    *, conversation: Conversation, user_message: Message, sink: Any, stop: asyncio.Event | None = None, index: int = 0
) -> Message:
    setup = await database_sync_to_async(_setup)(conversation)
    plan = setup["resume"]
    if plan is not None:
        await database_sync_to_async(services.plan_resume)(plan=plan, user_query=user_message.content)
        _status, text = await executor.execute(plan_id=plan.pk, sink=sink, index=index)
        return await _reply(conversation, sink, index, text)
    choice = setup["choice"]
    if choice is None:
        return await _reply(conversation, sink, index, _("This tenant has no model provider."), failed=True)
    messages = list(setup["messages"])
    retries = 0
    calls: list[dict[str, Any]] = []
    for _round in range(MAX_ROUNDS):
        answer = await complete_chat(
            tenant=setup["tenant"], provider=choice.provider, model=choice.model, messages=messages,
            tools=[LIST_AGENTS, CREATE_PLAN], agent_id=conversation.agent_id, conversation_id=conversation.pk,
            cancel=stop,
        )  # fmt: skip
        calls.append({"call_id": answer.call_id, "tool_calls": [c.name for c in answer.tool_calls]})
        if not answer.tool_calls:
            return await _reply(conversation, sink, index, answer.text)
        parts = [c.as_message_part() if c.id else {**c.as_message_part(), "id": f"call_{uuid.uuid4().hex[:20]}"}
                 for c in answer.tool_calls]  # fmt: skip
        messages.append({"role": "assistant", "content": answer.text or None, "tool_calls": parts})
        for call, part in zip(answer.tool_calls, parts, strict=True):
            if call.name == "list_agents":
                rows = await database_sync_to_async(services.agents_available)(tenant=setup["tenant"])
                content = json.dumps(rows, ensure_ascii=False)
            elif call.name == "create_plan":
                arguments = call.parsed_arguments or {}
                steps = arguments.get("steps")
                problems = await database_sync_to_async(services.plan_problems)(tenant=setup["tenant"], steps=steps)
                if not problems:
                    plan = await database_sync_to_async(services.plan_create)(
                        conversation=conversation, name=str(arguments.get("name") or ""),
                        user_query=user_message.content, steps=steps, allow_concurrency=bool(
                            arguments.get("allow_concurrency", False)),
                    )  # fmt: skip
                    for entry in calls:
                        await database_sync_to_async(services.plan_log)(
                            plan=plan, kind=LogKind.MODEL_CALL, data={"role": "planner", **entry}
                        )
                    _status, text = await executor.execute(plan_id=plan.pk, sink=sink, index=index)
                    return await _reply(conversation, sink, index, text)
                retries += 1
                if retries > MAX_RETRIES:
                    text = _("The planner could not make a valid plan: %(problems)s") % {
                        "problems": "; ".join(problems)
                    }
                    return await _reply(conversation, sink, index, text, failed=True)
                content = _("Invalid plan: %(problems)s") % {"problems": "; ".join(problems)}
            else:
                content = f"Error: tool {call.name} is not available to the planner."
            messages.append({"role": "tool", "tool_call_id": part["id"], "content": content})
    return await _reply(conversation, sink, index, _("The planner did not finish planning."), failed=True)

"""The goal agent's own tools (seed 3's S, M1, I, and the way out): offered to goal runs only, never registered for
other agents. They run through agents.tools.invoke.invoke_tool like every tool (schema, timeout, errors as text);
what the loop must act on (a question, the end, tokens used, a dream) comes back in `ToolResult.context`.

R(query) and U(memory) are the registered `memory_recall` and `memory_remember`: a goal run calls them without a
conversation, so they act on the memory key "{agent}_{user}".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.modelcall import for_tool
from agents.tools import Tool, ToolCallContext, ToolError, ToolResult, get_tool
from core.conf import setting
from core.db import database_sync_to_async
from llm.errors import LLMError
from llm.messages import ChatMessage
from llm.models import LLMCall, ModelProvider, Purpose
from llm.options import ChatRequest
from memory.longterm.strength import Owner, sleep
from tenants.scope import tenant_scope

SLEEP = "sleep"
EXECUTE_TASK = "execute_task"
ASK_USER = "ask_user"
FINISH = "finish"
RECALL = "memory_recall"
REMEMBER = "memory_remember"

# Seed 3's M1(task, context) system prompt.
EXECUTION_PROMPT = (
    "分解任务为具体问题，逐个解决问题。Break the task into concrete questions and solve them one by one; reply with "
    "the result only."
)
NO_DREAM = "没有需要整理的记忆 / nothing was forgotten, so there is no dream"


@dataclass(frozen=True)
class ExecutionModel:
    """M1: the execution-tier model of the run's provider (None when the tenant has no provider)."""

    provider: ModelProvider | None
    model: str


def ask_timeout_limit() -> float:
    return float(setting("GOAL_ASK_TIMEOUT_SECONDS"))


class SleepTool(Tool):
    """S(): tidy the memory (memory.longterm.strength.sleep); the dream comes back, and is kept."""

    name = SLEEP
    description_en = "Tidy your memory and stay efficient: forgets weak memories and returns a dream made of them."
    description_zh = "整理记忆、保持高效：遗忘弱的记忆，并返回由它们生成的梦境。"
    parameters = {"type": "object", "properties": {}, "additionalProperties": False}

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        return await database_sync_to_async(_sleep)(call)


def _sleep(call: ToolCallContext) -> ToolResult:
    if call.user_id is None or call.agent_id is None:
        raise ToolError(_("Sleep needs a user and an agent: this call has neither."))
    owner = Owner(user_id=call.user_id, key=f"{call.agent_id}_{call.user_id}", agent_id=call.agent_id)
    before = timezone.now()
    with tenant_scope(call.tenant):
        dream = sleep(owner, tenant=call.tenant)
        # sleep() does not return its usage; the dream's model call is recorded under the agent.
        tokens = (
            LLMCall.objects.filter(agent_id=call.agent_id, purpose=Purpose.EXTRACT, created_at__gte=before).aggregate(
                total=Sum("total_tokens")
            )["total"]
            or 0
        )
    return ToolResult(content=dream or NO_DREAM, context={"dream": dream, "tokens": tokens})


class ExecuteTaskTool(Tool):
    """M1(task, context): one call of the execution-tier model; its text is the result."""

    name = EXECUTE_TASK
    description_en = "Carry out a concrete, well-defined task with the execution model and get its result."
    description_zh = "执行具体明确的任务：交给执行模型完成并返回结果。"
    parameters = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "description": "The task / 具体明确的任务"},
            "context": {"type": "string", "description": "What the task needs to know / 完成任务需要的上下文"},
        },
        "required": ["task"],
        "additionalProperties": False,
    }

    def __init__(self, execution: ExecutionModel) -> None:
        self.execution = execution

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        task = arguments["task"].strip()
        if not task:
            raise ToolError(_("The task is empty: say what to do."))
        if self.execution.provider is None:
            raise ToolError(_("This tenant has no model provider: add one in Admin › Models › Model providers."))
        context = str(arguments.get("context") or "").strip()
        prompt = f"任务 / Task:\n{task}" + (f"\n\n上下文 / Context:\n{context}" if context else "")
        model = for_tool(call, self.execution.provider, self.execution.model, purpose=Purpose.CHAT)
        try:
            result = await model.complete(
                ChatRequest(messages=[ChatMessage.system(EXECUTION_PROMPT), ChatMessage.user(prompt)])
            )
        except LLMError as exc:
            raise ToolError(_("The execution model failed: %(reason)s") % {"reason": exc.message}) from None
        return ToolResult(content=result.text, context={"tokens": result.usage.total_tokens})


class AskUserTool(Tool):
    """I(tip, timeout): ask the user and wait up to `timeout` seconds; the loop waits without holding a worker."""

    name = ASK_USER
    description_en = (
        "Ask the user for input. You get their answer, or 'the user has not replied yet' once the timeout passes."
    )
    description_zh = "请求用户输入。返回用户的回答；超时后返回“用户暂未回复”。"
    parameters = {
        "type": "object",
        "properties": {
            "tip": {"type": "string", "minLength": 1, "description": "What to ask / 输入提示信息"},
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "description": "Seconds you are willing to wait for the user / 愿意等待用户的时间（秒）",
            },
        },
        "required": ["tip"],
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        tip = arguments["tip"].strip()
        if not tip:
            raise ToolError(_("The tip is empty: write what to ask the user."))
        limit = ask_timeout_limit()
        wanted = arguments.get("timeout")
        timeout = min(float(wanted), limit) if wanted else limit
        return ToolResult(content=tip, ask_user=tip, context={"timeout": timeout})


class FinishTool(Tool):
    """The way out of the loop: the goal is reached (or given up), with the result."""

    name = FINISH
    description_en = "End the loop when the goal is achieved (or cannot be), with the result for the user."
    description_zh = "目标已实现（或无法实现）时结束循环，并给出给用户的结果。"
    parameters = {
        "type": "object",
        "properties": {"result": {"type": "string", "minLength": 1, "description": "The result / 结果"}},
        "required": ["result"],
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        result = arguments["result"].strip()
        if not result:
            raise ToolError(_("The result is empty: say what was achieved."))
        return ToolResult(content="ok", context={"finish": result})


def goal_tools(execution: ExecutionModel) -> dict[str, Tool]:
    """The tools a goal run offers its model, by name: R, U, S, M1, I and finish."""
    tools: list[Tool | None] = [
        get_tool(RECALL),
        get_tool(REMEMBER),
        SleepTool(),
        ExecuteTaskTool(execution),
        AskUserTool(),
        FinishTool(),
    ]
    return {tool.name: tool for tool in tools if tool is not None}

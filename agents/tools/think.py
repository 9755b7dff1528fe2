"""The `deep_think` tool (L5): an executing agent asks the tenant's reasoning-tier model a hard question."""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import gettext as _

from agents.modelcall import for_tool
from agents.tools.base import Tool, ToolCallContext, ToolError, ToolResult
from agents.tools.registry import register_tool
from core.db import database_sync_to_async
from llm.errors import LLMError
from llm.messages import ChatMessage
from llm.models import Purpose, Tier
from llm.options import ChatRequest
from llm.selectors import TierChoice, model_for_tier
from tenants.models import Tenant
from tenants.scope import tenant_scope

SYSTEM_PROMPT = (
    "You are a careful reasoning model. Think the question through step by step, checking each step. "
    'Then write the answer on a final line that starts with "结论/Conclusion:" followed by the conclusion '
    "alone, in the language of the question.\n"
    "你是一个严谨的推理模型。请逐步思考并检查每一步，最后单独一行以“结论/Conclusion:”开头写出结论，使用提问的语言。"
)

_CONCLUSION = re.compile(r"^\s*(?:\*\*)?\s*(?:结论\s*/\s*Conclusion|结论|Conclusion)\s*(?:\*\*)?\s*[:：]\s*(.*)$", re.I)


def conclusion_of(text: str) -> str:
    """The text after the last "结论/Conclusion:" marker (with the lines that follow it), else the whole answer."""
    lines = text.strip().splitlines()
    for index in range(len(lines) - 1, -1, -1):
        match = _CONCLUSION.match(lines[index])
        if match:
            return "\n".join([match.group(1), *lines[index + 1 :]]).strip().strip("*").strip()
    return text.strip()


def _reasoning_model(tenant: Tenant) -> TierChoice | None:
    with tenant_scope(tenant):
        return model_for_tier(tenant=tenant, tier=Tier.REASONING)


@register_tool
class DeepThinkTool(Tool):
    name = "deep_think"
    label_en = "Deep thinking"
    label_zh = "深度思考"
    description_en = (
        "Ask the deep-reasoning model a hard question (calculations, multi-step logic, trade-offs) and get its "
        "conclusion. Give the question and any context it needs."
    )
    description_zh = "把困难的问题（计算、多步推理、权衡）交给深度推理模型，返回它的结论。请提供问题和所需的背景信息。"
    parameters = {
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1, "description": "The question / 问题"},
            "context": {"type": "string", "description": "Facts the question needs / 问题所需的背景信息"},
        },
        "required": ["question"],
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        choice = await database_sync_to_async(_reasoning_model)(call.tenant)
        if choice is None:
            raise ToolError(_("No model is configured for deep reasoning; answer without it."))
        question = arguments["question"]
        if arguments.get("context"):
            question = f"{question}\n\n{arguments['context']}"
        # The running turn's agent asks: its longest reply and stop signal hold for this call too (agents.modelcall).
        model = for_tool(call, choice.provider, choice.model, purpose=Purpose.EXTRACT)
        try:
            result = await model.complete(
                ChatRequest(messages=[ChatMessage.system(SYSTEM_PROMPT), ChatMessage.user(question)])
            )
        except LLMError as exc:
            raise ToolError(
                _("The reasoning model could not answer (%(error)s); answer without it.") % {"error": exc.message}
            ) from None
        return ToolResult(content=conclusion_of(result.text), context={"deep_think_model": choice.model})

"""The `ask_user` tool (A6): the model asks the user a question; the turn ends with the question shown."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from agents.tools.base import Tool, ToolCallContext, ToolError, ToolResult
from agents.tools.registry import register_tool


@register_tool
class AskUserTool(Tool):
    name = "ask_user"
    label_en = "Ask the user"
    label_zh = "询问用户"
    description_en = (
        "Ask the user a question when a required detail is missing or a choice is theirs to make; the turn ends "
        "and the user's answer comes as their next message. Never guess a required value: ask."
    )
    description_zh = (
        "当缺少必需的信息或需要用户做选择时向用户提问；本轮结束，用户的回答会作为下一条消息。不要猜测必填参数，要提问。"
    )
    parameters = {
        "type": "object",
        "properties": {"question": {"type": "string", "minLength": 1, "description": "The question / 要问用户的问题"}},
        "required": ["question"],
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        question = arguments["question"].strip()
        if not question:
            raise ToolError(_("The question is empty: write the question to ask the user."))
        return ToolResult(content=question, ask_user=question)

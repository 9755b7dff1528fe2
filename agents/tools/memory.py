"""Seed 3's R(query) and U(memory) as tools (A6): `memory_recall` and `memory_remember`.

Both act on the calling user's memory under the conversation's memory key (memory.longterm.recall.owner_of): an
agent's memory of that user, or a plan step's own key; never another user's, agent's or tenant's.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from agents.tools.base import Tool, ToolCallContext, ToolError, ToolResult
from agents.tools.registry import register_tool
from core.db import database_sync_to_async
from memory.longterm.recall import owner_of
from memory.longterm.strength import Owner, recall, remember
from memory.models import Conversation
from tenants.scope import tenant_scope

MAX_MEMORY_CHARS = 4000


def _owner(call: ToolCallContext) -> Any:
    conversation = Conversation.objects.filter(pk=call.conversation_id).first() if call.conversation_id else None
    if conversation is not None:
        return owner_of(conversation)
    if call.user_id is None or call.agent_id is None:
        raise ToolError(_("Memory needs a user and an agent: this call has neither."))
    return Owner(user_id=call.user_id, key=f"{call.agent_id}_{call.user_id}", agent_id=call.agent_id)


def _recall(call: ToolCallContext, query: str) -> ToolResult:
    with tenant_scope(call.tenant):
        result = recall(_owner(call), query)
    return ToolResult(content=[item.text for item in result.returned])


def _remember(call: ToolCallContext, text: str) -> ToolResult:
    with tenant_scope(call.tenant):
        remember(_owner(call), text, conversation_id=call.conversation_id)
    return ToolResult(content="ok")


@register_tool
class MemoryRecallTool(Tool):
    name = "memory_recall"
    description_en = "Recall memories related to a sentence (what you chose to remember earlier about this user)."
    description_zh = "回忆相关记忆：检索之前为该用户记住的内容。"
    parameters = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "description": "The sentence to look for / 需要在记忆中检索的句子",
            }
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        query = arguments["query"].strip()
        if not query:
            raise ToolError(_("The query is empty: say what to recall."))
        return await database_sync_to_async(_recall)(call, query)


@register_tool
class MemoryRememberTool(Tool):
    name = "memory_remember"
    description_en = "Remember a piece of memory (about 300 words at most) about this user for later conversations."
    description_zh = "记住一段记忆（300词左右），供之后的对话回忆。"
    parameters = {
        "type": "object",
        "properties": {
            "memory": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_MEMORY_CHARS,
                "description": "A memory to keep, about 300 words / 一段需要记住的记忆，300词左右",
            }
        },
        "required": ["memory"],
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        text = arguments["memory"].strip()
        if not text:
            raise ToolError(_("The memory is empty: say what to remember."))
        return await database_sync_to_async(_remember)(call, text)

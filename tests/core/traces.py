"""Helpers of the trace tests: an agent with long-term memory and the knowledge-base tool, and the finished spans
as a tree."""

from __future__ import annotations

import json

from agents.services import agent_create, conversation_start
from core.db import database_sync_to_async
from knowledge.services import document_add, knowledge_base_create
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

KNOWLEDGE_TOOL = "plugin_ai_knowledge_base_query"
MENU = {
    "1": {"name": "经典黄焖鸡", "description": "鸡肉鲜嫩，配以浓郁酱汁和土豆", "price": "12元"},
    "3": {"name": "香菇黄焖鸡", "description": "黄焖鸡加入香菇，风味独特", "price": "14元"},
}
TOOL_CALL = {"name": KNOWLEDGE_TOOL, "arguments": {"query": "香菇", "knowledge_base_name": "menu", "field": "keyword"}}
SECRET_KEY = "sk-trace-test-never-exported"


def script_tool_turn(scripted_llm) -> None:
    """The model asks the knowledge base once, then answers."""
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False}, "reply": {"tool_calls": [TOOL_CALL]}},
        {"when": {"has_tool_results": True}, "reply": {"text": "香菇黄焖鸡 is 14元.", "chunk_size": 4}},
    )


@database_sync_to_async
def make_conversation(tenant, member, scripted_llm, extraction="rules"):
    """An agent with long-term memory (rules extraction: no extra model call) and the knowledge-base tool, a menu
    knowledge base, and a conversation of `member`."""
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True,
                             max_retries=0, api_key=SECRET_KEY)  # fmt: skip
        knowledge_base = knowledge_base_create(tenant=tenant, name="menu")
        document_add(knowledge_base=knowledge_base, name="menu.json", content=json.dumps(MENU).encode())
        agent = agent_create(
            tenant=tenant, name="Waiter", system_prompt="You answer about the menu.", model="gpt-4",
            token_overflow_config={"strategy": "none"}, long_term_memory=True, memory_extraction=extraction,
        )  # fmt: skip
        agent.tools = [KNOWLEDGE_TOOL]
        agent.save()
        return conversation_start(agent=agent, user=member), knowledge_base


async def turn(tenant, conversation, text):
    return await user_turn(tenant, conversation, text)


def tree(spans) -> list[tuple[int, str]]:
    """(depth, name) of each span, depth first in start order from the roots."""
    by_parent: dict[int | None, list] = {}
    ids = {span.context.span_id for span in spans}
    for span in sorted(spans, key=lambda s: s.start_time):
        parent = span.parent.span_id if span.parent is not None and span.parent.span_id in ids else None
        by_parent.setdefault(parent, []).append(span)
    out: list[tuple[int, str]] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in by_parent.get(parent, []):
            out.append((depth, span.name))
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return out

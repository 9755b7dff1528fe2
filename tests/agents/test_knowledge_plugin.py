"""The knowledge-base plugin (K6): named and attached knowledge bases, sources to cite, tenant isolation, and a turn
where the model calls it through the real tool loop against the scripted OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.core.exceptions import ValidationError

from agents.config import conversation_config
from agents.services import agent_create, agent_publish, agent_update, conversation_start
from agents.tools import ToolCallContext, ToolError, get_tool
from knowledge.services import document_add, knowledge_base_create
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)

MENU = {
    "1": {"name": "经典黄焖鸡", "description": "鸡肉鲜嫩，配以浓郁酱汁和土豆", "price": "12元", "category": "主菜"},
    "2": {"name": "辣味黄焖鸡", "description": "经典黄焖鸡基础上加入辣椒调味", "price": "13元", "category": "主菜"},
    "3": {"name": "香菇黄焖鸡", "description": "黄焖鸡加入香菇，风味独特", "price": "14元", "category": "主菜"},
}
TOOL = "plugin_ai_knowledge_base_query"


def _menu_base(tenant, name="huangmenji_menu"):
    with tenant_scope(tenant):
        knowledge_base = knowledge_base_create(tenant=tenant, name=name)
        document = document_add(
            knowledge_base=knowledge_base, name="menu.json", content=json.dumps(MENU, ensure_ascii=False).encode()
        )
        document.refresh_from_db()
        assert document.status == "ready", document.error
        return knowledge_base


def _run(tenant, arguments, **call):
    return asyncio.run(get_tool(TOOL).run(arguments, ToolCallContext(tenant=tenant, **call)))


def test_a_named_knowledge_base_is_searched_and_results_carry_their_source(tenant):
    _menu_base(tenant)
    result = _run(tenant, {"query": "香菇", "knowledge_base_name": "huangmenji_menu", "field": "keyword"})
    first = result.content[0]
    assert first["name"] == "香菇黄焖鸡" and first["source"].startswith("menu.json #")
    assert result.context["knowledge_sources"][0]["document"] == "menu.json"
    assert result.context["knowledge_query"] == {"query": "香菇", "knowledge_bases": ["huangmenji_menu"]}


def test_a_record_field_can_be_asked_for(tenant):
    _menu_base(tenant)
    result = _run(tenant, {"query": "辣椒", "knowledge_base_name": "huangmenji_menu", "field": "price", "top_k": 1})
    assert len(result.content) == 1 and result.content[0]["price"] == "13元"
    assert "description" not in result.content[0]


def test_another_tenants_knowledge_base_is_not_found(tenant, other_tenant):
    _menu_base(other_tenant)
    with pytest.raises(ToolError, match="no knowledge base named"):
        _run(tenant, {"query": "香菇", "knowledge_base_name": "huangmenji_menu"})


def test_without_a_name_the_agents_attached_knowledge_bases_are_searched(tenant):
    menu = _menu_base(tenant)
    _menu_base(tenant, name="unattached")
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Menu", knowledge_bases=[menu])
        bare = agent_create(tenant=tenant, name="Bare")
    result = _run(tenant, {"query": "香菇"}, agent_id=agent.pk)
    assert result.context["knowledge_query"]["knowledge_bases"] == ["huangmenji_menu"]
    with pytest.raises(ToolError, match="No knowledge base is attached"):
        _run(tenant, {"query": "香菇"}, agent_id=bare.pk)


def test_attaching_another_tenants_knowledge_base_is_refused(tenant, other_tenant):
    foreign = _menu_base(other_tenant)
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Menu")
        with pytest.raises(ValidationError):
            agent_update(agent=agent, knowledge_bases=[foreign])
        assert list(agent.knowledge_bases.all()) == []


def test_a_version_freezes_the_knowledge_bases_and_the_tool_is_offered(tenant, member):
    menu = _menu_base(tenant)
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Menu", knowledge_bases=[menu])
        version = agent_publish(agent=agent, user=None)
        assert version.snapshot["knowledge_base_ids"] == [menu.pk]
        conversation = conversation_start(agent=agent, user=member)
        agent_update(agent=agent, knowledge_bases=[])  # the draft changes; the conversation keeps its version
        config = conversation_config(conversation)
    assert config.tool_names == (TOOL,) and config.knowledge_base_ids == (menu.pk,)


def test_a_turn_calls_the_plugin_and_the_model_gets_the_sources_to_cite(tenant, member, scripted_llm):
    menu = _menu_base(tenant)
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False},
         "reply": {"tool_calls": [{"name": TOOL, "arguments": {"query": "有香菇的菜"}}]}},
        {"when": {"has_tool_results": True}, "reply": {"text": "推荐香菇黄焖鸡 [menu.json #3]"}},
    )  # fmt: skip
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True,
                             max_retries=0)  # fmt: skip
        agent = agent_create(tenant=tenant, name="Menu", model="gpt-4", knowledge_bases=[menu],
                             token_overflow_config={"strategy": "none"})  # fmt: skip
        agent_publish(agent=agent, user=None)
        conversation = conversation_start(agent=agent, user=member)

    _user, reply, sink = asyncio.run(user_turn(tenant, conversation, "有香菇的菜吗？"))

    assert reply.content == "推荐香菇黄焖鸡 [menu.json #3]"
    tool_frames = sink.of("tool")
    assert [frame["status"] for frame in tool_frames] == ["started", "completed"]
    second = scripted_llm.requests()[1]["body"]
    results = json.loads(second["messages"][-1]["content"])
    assert any(item["name"] == "香菇黄焖鸡" and item["source"].startswith("menu.json #") for item in results)
    assert TOOL in [tool["function"]["name"] for tool in second["tools"]]

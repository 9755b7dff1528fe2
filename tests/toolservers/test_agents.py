"""MCP tools in use: an agent's chat turn and a workflow step call a real MCP server's tool through invoke_tool;
the agent page offers a tenant's enabled MCP tools grouped by server, and never another tenant's."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.core.exceptions import ValidationError

from agents.export import AgentImportError, agent_export, agent_import
from agents.services import agent_create, conversation_start
from agents.workflows.runner import run_workflow
from agents.workflows.schema import WorkflowValidationError, parse_workflow
from core.db import database_sync_to_async
from memory.models import Message
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "mcp__tt__weather"
FLOW = f"""version: '1.0'
name: 'weather flow'
steps:
  - id: 'start'
    type: 'input'
    output:
      name: 'city'
      type: 'str'
  - id: 'look'
    type: 'plugin'
    plugin: '{WEATHER}'
    inputs:
      city: '{{city}}'
    outputs:
      name: 'report'
  - id: 'answer'
    type: 'output'
    inputs:
      report: '{{report}}'
"""


def _agent(tenant, member, scripted_llm, tools):
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True,
                             max_retries=0)  # fmt: skip
        agent = agent_create(tenant=tenant, name="Weather", system_prompt="You report the weather.", model="gpt-4",
                             token_overflow_config={"strategy": "none"})  # fmt: skip
        agent.tools = list(tools)
        agent.full_clean()
        agent.save()
        return conversation_start(agent=agent, user=member)


async def test_an_agent_calls_an_mcp_tool_in_a_chat_turn(tenant, member, make_server, scripted_llm):
    await database_sync_to_async(make_server)(tenant, enable=("weather",))
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False},
         "reply": {"tool_calls": [{"name": WEATHER, "arguments": {"city": "Oslo"}}]}},
        {"when": {"has_tool_results": True}, "reply": {"text": "The tool says: {last_message}"}},
    )  # fmt: skip
    conversation = await database_sync_to_async(_agent)(tenant, member, scripted_llm, [WEATHER])
    _user, reply, sink = await user_turn(tenant, conversation, "Weather in Oslo?")

    first, second = [r["body"] for r in await asyncio.to_thread(scripted_llm.requests)]
    (offered,) = first["tools"]
    assert offered["function"]["name"] == WEATHER and offered["function"]["description"] == "The weather in a city."
    assert offered["function"]["parameters"]["required"] == ["city"]
    assert second["messages"][-1] == {**second["messages"][-1], "role": "tool", "content": "Sunny in Oslo, 21 °C"}
    assert reply.content == "The tool says: Sunny in Oslo, 21 °C"
    started, completed = sink.of("tool")
    assert (started["status"], completed["status"]) == ("started", "completed")
    assert completed["name"] == WEATHER and completed["result"] == "Sunny in Oslo, 21 °C"

    def stored():
        with tenant_scope(tenant):
            return list(Message.objects.filter(conversation=conversation).order_by("id").values_list("role", "content"))

    assert (await database_sync_to_async(stored)())[2] == ("tool", "Sunny in Oslo, 21 °C")


async def test_a_failing_mcp_tool_is_reported_to_the_model(tenant, member, make_server, scripted_llm):
    await database_sync_to_async(make_server)(tenant, enable=("fail",))
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False},
         "reply": {"tool_calls": [{"name": "mcp__tt__fail", "arguments": {"reason": "x"}}]}},
        {"when": {"has_tool_results": True}, "reply": {"text": "Sorry: {last_message}"}},
    )  # fmt: skip
    conversation = await database_sync_to_async(_agent)(tenant, member, scripted_llm, ["mcp__tt__fail"])
    _user, reply, sink = await user_turn(tenant, conversation, "Try it")
    assert reply.content.startswith("Sorry: Error: fail reported an error:")
    assert sink.of("tool")[-1]["status"] == "failed"


def test_a_workflow_step_calls_an_mcp_tool(tenant, make_server):
    make_server(tenant, enable=("weather",))
    with tenant_scope(tenant):
        document = parse_workflow(FLOW, tenant=tenant)  # known to the tenant
        result = asyncio.run(run_workflow(document, tenant=tenant, message="Lisbon"))
    assert result.status == "completed", result.error
    assert result.variables["report"] == "Sunny in Lisbon, 21 °C"
    assert [entry["step"] for entry in result.log][:2] == ["start", "look"]


def test_a_workflow_of_another_tenant_cannot_use_the_tool(tenant, other_tenant, make_server):
    make_server(tenant, enable=("weather",))
    with tenant_scope(other_tenant), pytest.raises(WorkflowValidationError, match="Unknown plugin"):
        parse_workflow(FLOW, tenant=other_tenant)
    with tenant_scope(other_tenant):
        result = asyncio.run(run_workflow(parse_workflow(FLOW), tenant=other_tenant, message="Lisbon"))
    assert result.status == "failed" and "is not a registered tool" in result.error


def test_the_agent_page_offers_enabled_mcp_tools_by_server(tenant, other_tenant, tenant_admin, make_server, client):
    make_server(tenant, enable=("weather", "add"))
    make_server(other_tenant, enable=("weather", "big"), name="Foreign tools", slug="ft")
    client.force_login(tenant_admin)
    page = client.get("/agents/new/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'data-tool="mcp__tt__weather" data-group="Test tools"' in page and "MCP server: Test tools" in page
    assert 'data-tool="mcp__tt__add"' in page and "mcp__tt__fail" not in page  # listed, not enabled
    assert "Foreign tools" not in page and "mcp__ft__" not in page
    assert "The weather in a city." in page and "Input schema" in page


def test_an_agent_may_not_name_another_tenants_mcp_tool(tenant, other_tenant, member, make_server, scripted_llm):
    make_server(other_tenant, enable=("weather",))
    with pytest.raises(ValidationError, match="Unknown tools: mcp__tt__weather"):
        _agent(tenant, member, scripted_llm, [WEATHER])


def test_the_chat_page_names_the_tenants_mcp_tools(tenant, member, make_server, scripted_llm, client):
    make_server(tenant, enable=("weather",))
    conversation = _agent(tenant, member, scripted_llm, [WEATHER])
    client.force_login(member)
    page = client.get(f"/chat/{conversation.pk}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    labels = json.loads(page.partition('id="chat-labels" type="application/json">')[2].partition("</script>")[0])
    assert labels["toolNames"][WEATHER] == "Test tools › weather"  # the progress line's label, not the identifier


def test_an_exported_agent_with_mcp_tools_imports_where_the_tools_exist(tenant, other_tenant, member, make_server,
                                                                         scripted_llm):  # fmt: skip
    make_server(tenant, enable=("weather",))
    conversation = _agent(tenant, member, scripted_llm, [WEATHER])
    with tenant_scope(tenant):
        text = agent_export(agent=conversation.agent)
        again = agent_import(tenant=tenant, text=text)
        assert again.tools == [WEATHER]
    # Another tenant has no such server: the import names the missing tool instead of making a broken agent.
    with tenant_scope(other_tenant), pytest.raises(AgentImportError) as refused:
        agent_import(tenant=other_tenant, text=text)
    assert WEATHER in str(refused.value.errors)

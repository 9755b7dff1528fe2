"""The energy pack's tools, its demo agents, and the PV economics workflow agent asking and computing."""

from __future__ import annotations

import pytest

import agents.packs.energy.tools  # noqa: F401 - registers the tools even before the app is in INSTALLED_APPS
from agents.models import Agent, Workflow, WorkflowRun
from agents.packs.energy.demo import DEMO_AGENTS, ECONOMICS_WORKFLOW, PLANNER_AGENT, seed_energy_demo
from agents.services import agent_ensure, conversation_start
from agents.tools import ToolCallContext, ToolError, get_tool
from core.db import database_sync_to_async
from llm.services import provider_ensure_demo
from tenants.demo import run_demo_seeders
from tenants.scope import tenant_scope
from tests.turns import user_turn


def test_pv_economics_requires_the_location_and_the_project_type():
    tool = get_tool("pv_economics")
    assert tool.parameters["required"] == ["location", "project_type"]
    assert tool.validation_errors({"project_type": "工商业"}) == ["arguments: 'location' is a required property"]
    assert tool.validation_errors({"location": "杭州"}) == ["arguments: 'project_type' is a required property"]
    assert tool.validation_errors({"location": "杭州", "project_type": "地面电站"})
    assert tool.validation_errors({"location": "杭州", "project_type": "户用", "capacity_kw": 0})
    assert tool.validation_errors({"location": "杭州", "project_type": "户用", "capacity_kw": 8}) == []
    for name in ("pv_economics", "pv_sensitivity", "pv_report"):
        assert get_tool(name).description("zh-hans") != get_tool(name).description("en")


@pytest.mark.django_db
async def test_economics_then_sensitivity_then_report_through_the_tool_context(tenant):
    call = ToolCallContext(tenant=tenant)
    result = await get_tool("pv_economics").run({"location": "杭州余杭区", "project_type": "工商业"}, call)
    assert "Capacity: 100 kW" in result.content and "Full-load hours: 1100 h" in result.content
    assert result.context == {"pv_estimate": {"location": "杭州余杭区", "project_type": "工商业"}}

    call.context.update(result.context)
    sensitivity = await get_tool("pv_sensitivity").run({}, call)
    assert "| Electricity price | +20% |" in sensitivity.content
    assert len(sensitivity.context["pv_sensitivity"]) == 12

    report = await get_tool("pv_report").run({}, call)
    assert report.content.startswith("# PV economics: 杭州余杭区, 工商业")
    assert "| Factor | Change | IRR |" in report.content
    assert report.context["report_markdown"] == report.content
    assert report.context["title"] == "PV economics: 杭州余杭区, 工商业"

    residential = await get_tool("pv_economics").run({"location": "成都", "project_type": "户用"}, call)
    assert "Capacity: 10 kW" in residential.content and "900 h" in residential.content


@pytest.mark.django_db
async def test_the_tools_refuse_without_an_estimate_or_for_an_unknown_city(tenant):
    call = ToolCallContext(tenant=tenant)
    with pytest.raises(ToolError, match="required"):
        await get_tool("pv_sensitivity").run({}, call)
    with pytest.raises(ToolError, match="required"):
        await get_tool("pv_report").run({}, call)
    with pytest.raises(ToolError, match="Known cities"):
        await get_tool("pv_economics").run({"location": "火星基地", "project_type": "户用"}, call)


def _agents(tenant):
    with tenant_scope(tenant):
        return {agent.name: agent for agent in Agent.objects.filter(tenant=tenant)}


def _versions(tenant, agents):
    with tenant_scope(tenant):
        return {name: agent.published_version() for name, agent in agents.items()}


ECONOMICS = "光伏经济性测算 / PV economics"


@pytest.mark.django_db
def test_the_seeder_gives_the_energy_tenant_three_published_agents_idempotently(tenant, other_tenant):
    energy = tenant  # the energy demo tenant (slug "energy"), with the energy pack (tests/energy/conftest.py)
    lines = []
    run_demo_seeders([energy, other_tenant], lines.append, pack="energy")
    agents = _agents(energy)
    assert set(agents) == {spec["name"] for spec in [*DEMO_AGENTS, PLANNER_AGENT]}
    assert agents["能源规划师 / Energy planner"].kind == "planner"
    assert agents[ECONOMICS].kind == "workflow" and agents[ECONOMICS].tools == []
    assert agents["敏感性分析 / Sensitivity analysis"].tools == ["pv_sensitivity"]
    assert agents["报告生成 / Report"].tools == ["pv_report"]
    versions = _versions(energy, agents)
    assert {version.number for version in versions.values()} == {1}
    # The economics agent's version froze its workflow document (the pack's file).
    assert versions[ECONOMICS].snapshot["workflow_yaml"] == ECONOMICS_WORKFLOW.read_text(encoding="utf-8")
    assert _agents(other_tenant) == {}  # only the tenant with the energy pack
    assert len(lines) == 1

    seed_energy_demo([energy], lines.append)  # again: nothing new, nothing republished
    again = _agents(energy)
    assert {name: agent.pk for name, agent in again.items()} == {name: agent.pk for name, agent in agents.items()}
    assert {name: v.number for name, v in _versions(energy, again).items()} == {name: 1 for name in agents}
    with tenant_scope(energy):
        assert Workflow.objects.count() == 1


@pytest.mark.django_db
def test_re_seeding_turns_an_existing_react_economics_agent_into_the_workflow_agent(tenant):
    with tenant_scope(tenant):  # what an earlier seed_demo left: the economics agent as a ReAct agent
        agent_ensure(tenant=tenant, spec={"name": ECONOMICS, "kind": "react", "tools": ["pv_economics", "ask_user"]})
    seed_energy_demo([tenant], lambda line: None)
    agent = _agents(tenant)[ECONOMICS]
    with tenant_scope(tenant):
        version = agent.published_version()
        workflow = Workflow.objects.get(agent=agent)
    assert agent.kind == "workflow" and version.number == 2 and version.snapshot["kind"] == "workflow"
    assert version.snapshot["workflow_yaml"] == workflow.yaml and workflow.name == "光伏经济性测算"


@pytest.mark.django_db(transaction=True)
async def test_the_economics_workflow_agent_asks_for_the_location_then_estimates(tenant, member):
    def make():
        provider_ensure_demo(tenant=tenant)
        seed_energy_demo([tenant], lambda line: None)
        with tenant_scope(tenant):
            return conversation_start(agent=Agent.objects.get(name=ECONOMICS), user=member)

    def runs():
        with tenant_scope(tenant):
            return list(WorkflowRun.objects.order_by("id").values_list("status", flat=True))

    conversation = await database_sync_to_async(make)()
    _user, reply, sink = await user_turn(tenant, conversation, "帮我算一下光伏项目的收益")
    assert sink.tools() == [("ask_project", "interrupted")]
    assert reply.content == "请问项目地点在哪里？是工商业还是户用光伏？"
    assert sink.of("step")[-1]["status"] == "interrupted"
    assert await database_sync_to_async(runs)() == ["interrupted"]

    _user, reply, sink = await user_turn(tenant, conversation, "地点是杭州余杭区，进行工商业光伏测算")
    assert sink.tools() == [("ask_project", "completed"), ("economics", "completed"), ("output_step", "completed")]
    assert "杭州余杭区, 工商业" in reply.content and "IRR: 21.81%" in reply.content  # 0.5%/year degradation
    assert await database_sync_to_async(runs)() == ["completed"]  # the same run went on

    _user, reply, sink = await user_turn(tenant, conversation, "成都，户用")
    assert [name for name, _status in sink.tools()] == ["ask_project", "economics", "output_step"]
    assert "Capacity: 10 kW" in reply.content

    _user, reply, sink = await user_turn(tenant, conversation, "地点是火星基地，工商业")
    assert sink.tools()[-1] == ("economics", "failed")
    assert "No full-load hours are known for 火星基地" in reply.content
    assert await database_sync_to_async(runs)() == ["completed", "completed", "failed"]

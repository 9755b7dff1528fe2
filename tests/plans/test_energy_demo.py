"""Issue 7 item 8 end to end with the offline demo model: the energy planner plans economics -> sensitivity ->
report, asks for the location, resumes on the answer and stores the report as a file its tenant can open."""

import pytest

from agents.models import Agent
from agents.packs.energy.demo import PLANNER_AGENT, seed_energy_demo
from agents.services import conversation_start
from core.db import database_sync_to_async
from llm.demo import demo_engine
from llm.services import provider_ensure_demo
from plans.models import Plan, PlanStep, StepRecord
from tenants.scope import tenant_scope
from tests.factories import with_packs
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = ["光伏经济性测算 / PV economics", "敏感性分析 / Sensitivity analysis", "报告生成 / Report"]


def _plan(tenant):
    with tenant_scope(tenant):
        plan = Plan.objects.get()
        return plan, list(PlanStep.objects.filter(plan=plan).order_by("seqNo"))


async def test_the_energy_planner_demo_asks_resumes_and_stores_the_report(
    tenant, member, other_tenant, other_tenant_admin, login, monkeypatch
):
    monkeypatch.setitem(demo_engine().defaults, "delay", 0)

    def make():
        provider_ensure_demo(tenant=tenant)
        seed_energy_demo([with_packs(tenant, "energy")], lambda line: None)
        with tenant_scope(tenant):
            planner = Agent.objects.get(name=PLANNER_AGENT["name"])
            return conversation_start(agent=planner, user=member)

    conversation = await database_sync_to_async(make)()
    _user, reply, sink = await user_turn(tenant, conversation, "帮我生成一份光伏经济测算报告")
    plan, steps = await database_sync_to_async(_plan)(tenant)
    assert [(s.seqNo, s.agentName, s.depends_on) for s in steps] == [
        (1, STEPS[0], []), (2, STEPS[1], [1]), (3, STEPS[2], [2])
    ]  # fmt: skip
    assert plan.status == "interrupted"
    assert [s.status for s in steps] == ["interrupted", "not_started", "not_started"]
    assert reply.content.endswith("请问项目地点在哪里？是工商业还是户用光伏？")

    _user, reply, sink = await user_turn(tenant, conversation, "地点是杭州余杭区，进行工商业光伏测算")
    plan, steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "completed"
    assert [s.status for s in steps] == ["completed"] * 3
    assert "光伏经济测算报告已完成" in reply.content
    assert [name for name, _status in sink.tools()] == [
        "ask_project",
        "economics",
        "output_step",
        "pv_sensitivity",
        "pv_report",
    ]
    assert all(status == "completed" for _name, status in sink.tools())
    report_frame = [f for f in sink.of("step") if f["index"] == 3][-1]
    data = report_frame["agentChatResponse"]["data"]
    assert data["url"] and data["title"] == "PV economics: 杭州余杭区, 工商业"

    def record():
        with tenant_scope(tenant):
            return StepRecord.objects.get(recordId=data["recordId"])

    stored = await database_sync_to_async(record)()
    assert stored.content_type == "text/markdown" and "杭州余杭区" in stored.content
    assert steps[2].result["url"] == data["url"] and "report_markdown" not in steps[2].result["context"]

    def fetch():
        client = login(member, tenant)
        page = client.get(data["url"])
        download = client.get(data["url"] + "?download=1")
        other = login(other_tenant_admin, other_tenant).get(data["url"] + "?download=1")
        return page, download, other

    page, download, other = await database_sync_to_async(fetch)()
    assert page.status_code == 200 and "杭州余杭区" in page.content.decode()
    assert download.status_code == 200 and download["Content-Type"].startswith("text/markdown")
    assert download.content.decode() == stored.content
    assert other.status_code == 404

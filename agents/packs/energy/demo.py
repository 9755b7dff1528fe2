"""Demo data of the energy pack: issue 7's PV demo for the energy tenant — three published step agents and the
published planner that plans them (economics -> sensitivity -> report)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from django.db import transaction

from agents.models import Agent, Workflow
from agents.services import agent_create, agent_ensure, agent_update
from agents.workflows.schema import parse_workflow
from agents.workflows.services import workflow_save
from tenants.models import Tenant
from tenants.scope import tenant_scope

# Each prompt starts with a "你是…助手" line that the offline demo model's rules (llm/scripts/demo.yaml) look for.
# The economics agent is a workflow agent (no model call): its prompt only says what it is.
ECONOMICS_PROMPT = """你是光伏经济性测算助手（工作流智能体）。
它按工作流 workflows/pv_economics.yaml 运行：缺少项目地点或类型（工商业/户用）时先问用户，再用 pv_economics 计算。
The PV economics workflow agent: asks for the location and the project type when missing, then computes."""

ECONOMICS_WORKFLOW = Path(__file__).resolve().parent / "workflows" / "pv_economics.yaml"

SENSITIVITY_PROMPT = """你是敏感性分析助手。
你用工具 pv_sensitivity 分析电价、单位造价和满发小时数变化 ±10%、±20% 对 IRR、NPV 和回收期的影响，
沿用上一步光伏经济性测算的结果；工具返回后，说明哪个因素影响最大。
You are the sensitivity analysis assistant; answer in the user's language."""

REPORT_PROMPT = """你是报告生成助手。
你用工具 pv_report 把光伏经济性测算和敏感性分析写成 Markdown 报告；工具返回后，简短说明报告已生成。
You are the report assistant; answer in the user's language."""

PLANNER_PROMPT = """你是能源规划师。
你把用户的能源项目需求拆成计划步骤，交给合适的助手执行：光伏经济测算报告依次是光伏经济性测算、敏感性分析、报告生成。
You are the energy planner; answer in the user's language."""

PLANNER_AGENT: dict[str, Any] = {
    "name": "能源规划师 / Energy planner",
    "description": (
        "把光伏经济测算报告等能源需求拆成计划：光伏经济性测算 -> 敏感性分析 -> 报告生成。"
        " Plans energy requests such as a PV economics report: PV economics -> sensitivity analysis -> report."
    ),
    "system_prompt": PLANNER_PROMPT,
    "kind": "planner",
    "tools": [],
}

DEMO_AGENTS: list[dict[str, Any]] = [
    {
        "name": "光伏经济性测算 / PV economics",
        "description": (
            "按项目地点和类型（工商业/户用）测算光伏项目的发电量、收益、投资、回收期、IRR 和 NPV；"
            "缺少地点或类型时先问用户。"
            " Estimates a PV project's generation, revenue, investment, payback, IRR and NPV from its location and "
            "type (commercial/residential); asks the user when either is missing."
        ),
        "system_prompt": ECONOMICS_PROMPT,
        "kind": "workflow",
        "tools": [],
        "workflow": ECONOMICS_WORKFLOW,
    },
    {
        "name": "敏感性分析 / Sensitivity analysis",
        "description": (
            "在光伏经济性测算之后，分析电价、单位造价、满发小时数变化 ±10%、±20% 时 IRR、NPV 和回收期的变化。"
            " After the PV economics, how IRR, NPV and payback move when the electricity price, the cost per kW "
            "and the full-load hours change by ±10% and ±20%."
        ),
        "system_prompt": SENSITIVITY_PROMPT,
        "kind": "react",
        "tools": ["pv_sensitivity"],
    },
    {
        "name": "报告生成 / Report",
        "description": (
            "把光伏经济性测算和敏感性分析写成一份 Markdown 报告（最后一步）。"
            " Writes the PV economics and the sensitivity analysis up as a Markdown report (the last step)."
        ),
        "system_prompt": REPORT_PROMPT,
        "kind": "react",
        "tools": ["pv_report"],
    },
]


def _ensure(tenant: Tenant, spec: dict[str, Any]) -> Agent:
    """agent_ensure, and for a workflow agent its workflow document bound to it first, so that the version
    published freezes the document (re-running changes nothing when agent and document are as specified)."""
    document = spec.get("workflow")
    spec = {key: value for key, value in spec.items() if key != "workflow"}
    if document is not None:
        text = document.read_text(encoding="utf-8")
        fields = {key: value for key, value in spec.items() if key != "name"}
        agent = Agent.objects.filter(tenant=tenant, name=spec["name"]).first()
        agent = agent_update(agent=agent, **fields) if agent else agent_create(tenant=tenant, **spec)
        workflow = Workflow.objects.filter(agent=agent).first()
        if workflow is None:
            workflow = Workflow.objects.filter(name=parse_workflow(text).name).first()
        if workflow is None or workflow.yaml != text or workflow.agent_id != agent.pk:
            workflow_save(tenant=tenant, yaml_text=text, workflow=workflow, agent=agent)
    return agent_ensure(tenant=tenant, spec=spec)[0]


def seed_energy_demo(tenants: Sequence[Tenant], write: Callable[[str], None]) -> None:
    """Each tenant gets the three PV agents and their planner, published (idempotent; an existing demo tenant's
    agents are brought back to the spec, e.g. the economics agent becomes the workflow agent). `seed_demo` gives it
    the demo tenants that have the energy pack (tenants.demo)."""
    for tenant in tenants:
        with tenant_scope(tenant), transaction.atomic():
            agents = [_ensure(tenant, spec) for spec in [*DEMO_AGENTS, PLANNER_AGENT]]
            names = ", ".join(f"{agent.name} (v{agent.published_version().number})" for agent in agents)
        write(f"Energy / 能源 @ {tenant.name}: {names}")

"""The energy pack's workflow document parses and runs the three tools in order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import agents.packs.energy.tools  # noqa: F401 - registers the tools even before the app is in INSTALLED_APPS
from agents.workflows.runner import run_workflow
from agents.workflows.schema import parse_workflow

WORKFLOW = Path(__file__).resolve().parents[2] / "agents/packs/energy/workflows/pv_demo.yaml"


@pytest.mark.django_db
def test_the_pv_workflow_runs_economics_sensitivity_and_report(tenant):
    document = parse_workflow(WORKFLOW.read_text(encoding="utf-8"))
    assert [step.id for step in document.steps] == ["input_step", "economics", "sensitivity", "report", "output_step"]
    result = asyncio.run(run_workflow(document, tenant=tenant, message="地点: 杭州余杭区\n类型: 工商业"))
    assert result.status == "completed", result.error
    assert result.text.startswith("# PV economics: 杭州余杭区, 工商业")
    assert "| Factor | Change | IRR |" in result.text
    assert result.context["title"] == "PV economics: 杭州余杭区, 工商业"
    assert result.context["report_markdown"] == result.text

"""The PV economics workflow document: it asks for what is missing, goes on with the answer without running the
earlier steps again, and computes with the pack's formulas."""

from __future__ import annotations

import asyncio

import pytest

import agents.packs.energy.tools  # noqa: F401 - registers the tools
from agents.packs.energy import pv
from agents.packs.energy.demo import ECONOMICS_WORKFLOW
from agents.workflows.runner import run_workflow
from agents.workflows.schema import parse_workflow

pytestmark = pytest.mark.django_db


def _run(tenant, message, **kwargs):
    document = parse_workflow(ECONOMICS_WORKFLOW.read_text(encoding="utf-8"))
    return asyncio.run(run_workflow(document, tenant=tenant, message=message, **kwargs))


def test_without_location_and_type_the_run_pauses_with_the_question(tenant):
    result = _run(tenant, "帮我生成一份光伏经济测算报告")
    assert result.status == "interrupted" and result.text == "请问项目地点在哪里？是工商业还是户用光伏？"
    assert result.pause.step == "ask_project" and result.pause.missing == ["location", "project_type"]
    assert [entry["step"] for entry in result.log] == ["ask_project"]


def test_the_answer_resumes_at_the_question_and_computes_with_the_formulas(tenant):
    paused = _run(tenant, "帮我生成一份光伏经济测算报告").pause
    result = _run(tenant, "地点是杭州余杭区，进行工商业光伏测算", resume=paused)
    assert result.status == "completed", result.error
    assert [entry["step"] for entry in result.log] == ["ask_project", "economics", "output_step"]
    assert result.variables["location"] == "杭州余杭区" and result.variables["project_type"] == "工商业"
    expected = pv.economics(pv.preset_inputs("工商业", 1100))
    assert result.text == pv.summary_markdown(expected, "PV economics: 杭州余杭区, 工商业") + (
        "\n\nFull-load hours of 杭州 (indicative value)."
    )
    assert result.context["pv_estimate"] == {"location": "杭州余杭区", "project_type": "工商业"}


def test_a_partial_answer_is_kept_and_only_the_rest_is_asked_again(tenant):
    first = _run(tenant, "我想做个光伏测算")
    second = _run(tenant, "户用的", resume=first.pause)
    assert second.status == "interrupted" and second.pause.missing == ["location"]
    assert second.pause.variables == {"project_type": "户用"} and second.pause.asks == 2
    third = _run(tenant, "项目在成都", resume=second.pause)
    assert third.status == "completed", third.error
    assert "Capacity: 10 kW" in third.text and "Full-load hours: 900 h" in third.text


def test_a_plan_step_request_is_read_from_its_user_query(tenant):
    request = '{"requirement": "测算经济性", "userQuery": "成都，户用", "context": {}, "dependencies": []}'
    result = _run(tenant, request)
    assert result.status == "completed" and result.variables["location"] == "成都"


def test_after_three_questions_without_an_answer_the_step_fails(tenant):
    result = _run(tenant, "你好")
    for _attempt in range(2):
        result = _run(tenant, "用户暂未回复 / the user has not replied", resume=result.pause)
        assert result.status == "interrupted"
    result = _run(tenant, "用户暂未回复 / the user has not replied", resume=result.pause)
    assert result.status == "failed" and "Missing input: location, project_type" in result.error

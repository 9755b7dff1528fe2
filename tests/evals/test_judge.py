"""The judge (issue 39): the agent's own model scores a rubric with the dataset's prompt (the default, or the one the
builder edited), each call recorded as the tenant's usage and held to its budget; an answer that is not a score is a
failed verdict saying so, not a crash."""

from __future__ import annotations

import asyncio

import pytest

from core.db import database_sync_to_async
from evals.expectations import Observed, check_all
from evals.judge import DEFAULT_JUDGE_PROMPT, JudgeScore, judge_for, judge_message, parse_score
from evals.services import dataset_update
from llm import errors
from llm.demo import demo_engine
from llm.errors import LLMError
from llm.models import LLMCall
from tenants.scope import tenant_scope
from tests.evals.conftest import JUDGE_MARK, judge_rule
from tests.turns import flush_records

pytestmark = pytest.mark.django_db(transaction=True)

RUBRIC = {"kind": "rubric", "rubric": "Says which way the panels should face.", "min_score": 4}


def _judge(tenant, dataset):
    with tenant_scope(tenant):
        return judge_for(dataset)


def _calls(tenant):
    with tenant_scope(tenant):
        return list(LLMCall.objects.values("agent_id", "total_tokens", "status", "model"))


async def _judged(tenant, dataset, expectations, reply="Face them south."):
    judge = await database_sync_to_async(_judge)(tenant, dataset)
    verdicts, tokens = await check_all(expectations, Observed(reply), turns=["Which way?"], judge=judge)
    await flush_records()
    return verdicts, tokens


async def _bodies(scripted_llm):
    return [request["body"] for request in await asyncio.to_thread(scripted_llm.requests)]


async def test_the_default_prompt_scores_and_the_cost_is_the_tenants(tenant, dataset, eval_agent, scripted_llm):
    scripted_llm.set_rules(judge_rule(5, "Names south."))
    verdicts, tokens = await _judged(tenant, dataset, [RUBRIC, {"kind": "contains", "text": "south"}])
    assert [(v.kind, v.passed) for v in verdicts] == [("rubric", True), ("contains", True)]
    assert "5" in verdicts[0].detail and "Names south." in verdicts[0].detail
    (body,) = await _bodies(scripted_llm)
    system, user = body["messages"]
    assert system == {"role": "system", "content": DEFAULT_JUDGE_PROMPT}
    assert user["content"].startswith(JUDGE_MARK)
    assert (
        "Says which way" in user["content"]
        and "1. Which way?" in user["content"]
        and "Face them south." in user["content"]
    )
    assert body["temperature"] == 0.0
    # Recorded as one of the tenant's model calls, against the agent; the verdicts' tokens are that call's.
    calls = await database_sync_to_async(_calls)(tenant)
    assert len(calls) == 1 and calls[0]["agent_id"] == eval_agent.pk and calls[0]["status"] == "ok"
    assert tokens == calls[0]["total_tokens"] > 0


async def test_an_edited_prompt_is_the_one_sent_and_a_low_score_fails(tenant, dataset, scripted_llm):
    def edit():
        with tenant_scope(tenant):
            dataset_update(dataset=dataset, judge_prompt="Be harsh. Answer JSON {score, reason}.")

    await database_sync_to_async(edit)()
    scripted_llm.set_rules(judge_rule(2, "Too vague."))
    verdicts, tokens = await _judged(tenant, dataset, [RUBRIC])
    assert not verdicts[0].passed and "Too vague." in verdicts[0].detail and tokens > 0
    (body,) = await _bodies(scripted_llm)
    assert body["messages"][0]["content"] == "Be harsh. Answer JSON {score, reason}."


@pytest.mark.parametrize("answer", ["I think it is good.", '{"score": 9, "reason": "x"}', '{"reason": "no score"}'])
async def test_an_answer_that_is_not_a_score_is_a_failed_verdict(tenant, dataset, scripted_llm, answer):
    scripted_llm.set_rules(judge_rule(text=answer))
    verdicts, tokens = await _judged(tenant, dataset, [RUBRIC, {"kind": "contains", "text": "south"}])
    assert [v.passed for v in verdicts] == [False, True]
    assert "not a JSON score" in verdicts[0].detail and tokens > 0


async def test_without_a_judge_a_rubric_fails_and_costs_nothing(scripted_llm):
    verdicts, tokens = await check_all([RUBRIC], Observed("south"), turns=["x"], judge=None)
    assert (verdicts[0].passed, tokens) == (False, 0) and "No judge" in verdicts[0].detail
    assert await _bodies(scripted_llm) == []


async def test_the_judge_is_held_to_the_tenants_budget(tenant, dataset, scripted_llm):
    def spend():
        tenant.monthly_token_budget = 1
        tenant.save(update_fields=["monthly_token_budget"])

    await database_sync_to_async(spend)()
    scripted_llm.set_rules(judge_rule(5))
    with pytest.raises(LLMError) as raised:
        await _judged(tenant, dataset, [RUBRIC])
    assert raised.value.code == errors.QUOTA_EXCEEDED
    assert await _bodies(scripted_llm) == []
    assert [c["status"] for c in await database_sync_to_async(_calls)(tenant)] == ["refused"]


def test_parse_score_reads_a_fenced_or_wordy_answer():
    assert parse_score('```json\n{"score": 4, "reason": "ok"}\n```') == (4, "ok")
    assert parse_score('Sure: {"score": "3", "reason": "meh"} done') == (3, "meh")
    assert parse_score('{"score": 4.0}') == (4, "")
    assert parse_score('{"score": true}') is None
    assert parse_score("[1]") is None
    assert JudgeScore(4, "ok", 10).valid


def test_the_default_prompt_asks_for_the_json_score():
    assert '"score"' in DEFAULT_JUDGE_PROMPT and '"reason"' in DEFAULT_JUDGE_PROMPT and "1 to 5" in DEFAULT_JUDGE_PROMPT


def test_the_offline_demo_model_judges_a_rubric_with_a_fixed_score_it_says_is_a_demos():
    """A dataset with rubrics runs on the embedded default: the demo model answers the judge's message (its own
    rule, llm/scripts/demo.yaml) with a score the judge reads, and says it did not really judge."""
    message = judge_message(rubric=RUBRIC["rubric"], turns=["Which way?"], reply="Face them south.")
    plan = demo_engine().plan({"model": "demo-scripted", "messages": [{"role": "user", "content": message}]})
    score, reason = parse_score(plan.completion["choices"][0]["message"]["content"])
    assert score == 4 and "演示" in reason and "Demo model" in reason

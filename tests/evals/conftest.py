"""Shared fixtures of the evaluation tests (issue 39): an agent on the scripted model (published once), a dataset of
it with two cases, another tenant's agent and dataset, and the scripted judge.

`judge_rule(score, reason)` is a scripted-model rule that answers the judge's request (llm.fake_server): put it
first, `scripted_llm.set_rules(judge_rule(5), {"when": {}, "reply": {"text": "..."}})`, so the agent's own turns
get the other rules.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.models import Agent
from agents.services import agent_create, agent_publish
from evals.models import Dataset
from evals.services import case_create, dataset_create
from llm.models import ModelProvider
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory

# Every judge request's user message starts with this heading (evals.judge.judge_message), whatever its prompt.
JUDGE_MARK = "# Rubric / 评分标准"


def judge_rule(score: Any = 5, reason: str = "Meets the rubric.", *, text: str | None = None) -> dict[str, Any]:
    """A scripted rule answering the judge: {"score": score, "reason": reason}, or `text` as it is."""
    answer = text if text is not None else json.dumps({"score": score, "reason": reason}, ensure_ascii=False)
    return {"name": "judge", "when": {"last_message": {"contains": JUDGE_MARK}}, "reply": {"text": answer}}


def make_provider(tenant, scripted_llm) -> ModelProvider:
    with tenant_scope(tenant):
        return ModelProviderFactory(
            tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True, max_retries=0,
            private_network_allowed=True,
        )  # fmt: skip


def make_agent(tenant, provider: ModelProvider | None, name: str = "Solar advisor", *, publish: bool = True) -> Agent:
    with tenant_scope(tenant):
        agent = agent_create(
            tenant=tenant, name=name, system_prompt="You advise on solar panels.", provider=provider, model="gpt-4",
            token_overflow_config={"strategy": "none"},
        )  # fmt: skip
        if publish:
            agent_publish(agent=agent, user=None)
        return agent


def make_dataset(agent: Agent, name: str = "Basics") -> Dataset:
    with tenant_scope(agent.tenant):
        dataset = dataset_create(agent=agent, name=name)
        case_create(dataset=dataset, title="Greets", turns=["Hello"],
                    expectations=[{"kind": "contains", "text": "Hello"}])  # fmt: skip
        case_create(dataset=dataset, title="Two turns", turns=["My roof faces south.", "Is that good?"],
                    expectations=[{"kind": "not_contains", "text": "north"}])  # fmt: skip
        return dataset


@pytest.fixture
def eval_provider(tenant, scripted_llm) -> ModelProvider:
    """The tenant's default provider: the scripted server."""
    return make_provider(tenant, scripted_llm)


@pytest.fixture
def eval_agent(tenant, eval_provider) -> Agent:
    """A chat agent of `tenant` on the scripted model, with one published version."""
    return make_agent(tenant, eval_provider)


@pytest.fixture
def dataset(eval_agent) -> Dataset:
    """`eval_agent`'s dataset "Basics": two cases (one turn; two turns), a contains and a not_contains."""
    return make_dataset(eval_agent)


@pytest.fixture
def other_agent(other_tenant) -> Agent:
    """An agent of the other tenant (no provider of its own)."""
    return make_agent(other_tenant, None, name="Noodle chef")


@pytest.fixture
def other_dataset(other_agent) -> Dataset:
    """The other tenant's dataset (two cases), for isolation tests."""
    return make_dataset(other_agent, name="Theirs")


@pytest.fixture(autouse=True)
def _english(settings):
    """These tests read the English words (a page without Accept-Language answers in the site's default, zh-hans;
    the Chinese ones are read by the browser journey, tests/browser/test_eval_journey.py)."""
    settings.LANGUAGE_CODE = "en"

"""The demo's sample evaluation (evals/demo.py): `seed_demo` gives the restaurant tenant's waiter the dataset
"示例评测 / Sample evaluation", whose every case the offline demo model passes, on the published version and on the
draft, as a stranger runs it after `make run`; seeding again keeps one dataset with the same cases."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from agents.models import Agent
from evals.compare import Change, compare
from evals.demo import SAMPLE_CASES, SAMPLE_DATASET_NAME, WAITER_NAME
from evals.models import Case, Dataset, Run, RunStatus
from evals.services import case_create, case_update
from llm.demo import demo_engine
from llm.services import provider_ensure_demo
from tenants.demo import run_demo_seeders
from tenants.models import Role
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def restaurant(tenant):
    """The restaurant demo tenant (the restaurant pack, the demo model, an admin) beside `tenant`, which has no pack."""
    restaurant = TenantFactory(name="餐厅示范", slug="restaurant", packs=["restaurant"])
    MembershipFactory(tenant=restaurant, user=UserFactory(username="restaurant-admin"), role=Role.ADMIN)
    for each in (tenant, restaurant):
        provider_ensure_demo(tenant=each)
    return restaurant


def _seed(*tenants) -> list[str]:
    """The restaurant pack's demo seeders, as `seed_demo` runs them (the pack's own, then the evaluation's)."""
    lines: list[str] = []
    run_demo_seeders(tenants, lines.append, pack="restaurant")
    return lines


def _eval_run(version: str) -> dict:
    out = StringIO()
    call_command("eval_run", "--tenant", "restaurant", "--agent", WAITER_NAME, "--dataset", SAMPLE_DATASET_NAME,
                 "--version", version, "--threshold", "1", "--json", stdout=out)  # fmt: skip
    return json.loads(out.getvalue())


def _cases(restaurant) -> list[tuple[int, str, list, list]]:
    with tenant_scope(restaurant):
        dataset = Dataset.objects.get(agent__name=WAITER_NAME)
        return [(case.pk, case.title, case.turns, case.expectations) for case in dataset.cases.order_by("position")]


def test_every_sample_case_passes_on_the_demo_model_published_and_draft(restaurant, monkeypatch):
    monkeypatch.setitem(demo_engine().defaults, "delay", 0)
    assert any("示例评测 / Sample evaluation (5 cases)" in line for line in _seed(restaurant))

    published, draft = _eval_run("published"), _eval_run("draft")

    for summary in (published, draft):
        assert (summary["passed"], summary["failed"], summary["errored"]) == (len(SAMPLE_CASES), 0, 0), summary
        assert summary["passed_threshold"] is True
    with tenant_scope(restaurant):
        runs = list(Run.objects.order_by("pk"))
        assert [run.status for run in runs] == [RunStatus.DONE, RunStatus.DONE]
        assert runs[0].version is not None and runs[1].version is None
        assert runs[0].judge_tokens > 0  # the rubric case was judged by the demo model
        comparison = compare(runs[0], runs[1])
        assert [row.change for row in comparison.rows] == [Change.SAME_PASS] * len(SAMPLE_CASES)
        replies = {result.case.title: result.reply for result in runs[0].results.select_related("case")}
    assert "面包" in replies["售罄的菜如实告知 / Says a sold-out dish is sold out"]
    assert "9.00" in replies["点餐后结账 / Checks out after an order"]


def test_seeding_again_keeps_one_dataset_and_brings_the_demo_cases_back(tenant, restaurant):
    _seed(tenant, restaurant)
    first = _cases(restaurant)
    assert [title for _pk, title, _turns, _expectations in first] == [title for title, _t, _e in SAMPLE_CASES]

    with tenant_scope(restaurant):
        dataset = Dataset.objects.get(agent__name=WAITER_NAME)
        case_update(case=dataset.cases.get(title=SAMPLE_CASES[0][0]), turns=["你好"])
        mine = case_create(dataset=dataset, title="Mine", turns=["结账"], expectations=[{"kind": "question"}])
    _seed(tenant, restaurant)
    _seed(tenant, restaurant)

    with tenant_scope(restaurant):
        assert Dataset.objects.filter(name=SAMPLE_DATASET_NAME).count() == 1
        assert Case.objects.filter(pk=mine.pk).exists()  # a case a person added is kept
        assert Agent.objects.get(name=WAITER_NAME).versions.count() == 1
    assert _cases(restaurant)[: len(SAMPLE_CASES)] == first  # the same cases, the edited one brought back
    with tenant_scope(tenant):
        assert not Dataset.objects.exists()  # a tenant without the restaurant pack gets none

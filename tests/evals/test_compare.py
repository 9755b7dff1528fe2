"""Comparing two runs of a dataset (evals.compare): fixed, broken and the same per case, pass rates, tokens and mean
latency; runs of two datasets are refused; the latest finished run per version."""

from __future__ import annotations

import pytest

from agents.services import agent_publish
from evals.compare import Change, compare, latest_runs
from evals.models import CaseResult, ResultStatus, Run, RunStatus
from evals.services import case_create, dataset_create
from tenants.scope import tenant_scope

P, F, E = ResultStatus.PASSED, ResultStatus.FAILED, ResultStatus.ERROR


def _run(dataset, statuses, *, version=None, status=RunStatus.DONE, latency=100) -> Run:
    """A run whose results have `statuses` for the dataset's cases in order (None: the case did not run)."""
    cases = list(dataset.cases.order_by("position", "id"))
    counts = {status: sum(1 for s in statuses if s == status) for status in (P, F, E)}
    run = Run.objects.create(
        tenant=dataset.tenant, dataset=dataset, agent=dataset.agent, version=version, status=status,
        total=len(cases), done=sum(counts.values()), passed=counts[P], failed=counts[F], errored=counts[E],
        tokens=10 * len(cases),
    )  # fmt: skip
    for case, result in zip(cases, statuses, strict=True):
        if result is not None:
            CaseResult.objects.create(tenant=dataset.tenant, run=run, case=case, position=case.position,
                                      title=case.title, status=result, reply=f"{result} {case.title}",
                                      latency_ms=latency)  # fmt: skip
    return run


@pytest.fixture
def six(tenant, eval_agent):
    with tenant_scope(tenant):
        dataset = dataset_create(agent=eval_agent, name="Six")
        for n in range(6):
            case_create(dataset=dataset, title=f"C{n}", turns=["hi"], expectations=[{"kind": "contains", "text": "x"}])
        return dataset


def test_each_case_is_fixed_broken_or_the_same(tenant, six):
    with tenant_scope(tenant):
        a = _run(six, [F, P, P, F, E, P], latency=100)
        b = _run(six, [P, F, P, F, P, None], latency=300)
        result = compare(a, b)
    assert [row.change for row in result.rows] == [
        Change.FIXED, Change.BROKEN, Change.SAME_PASS, Change.SAME_FAIL, Change.FIXED, Change.ONLY_A,
    ]  # fmt: skip
    assert (result.fixed, result.broken, result.same) == (2, 1, 2)
    assert result.rows[0].a.reply == "failed C0" and result.rows[0].b.reply == "passed C0"
    assert result.pass_rate_a == pytest.approx(3 / 6) and result.pass_rate_b == pytest.approx(3 / 5)
    assert (result.tokens_a, result.latency_a_ms, result.latency_b_ms) == (60, 100, 300)


def test_a_case_added_after_the_first_run_is_only_in_the_second(tenant, six):
    with tenant_scope(tenant):
        a = _run(six, [P] * 6)
        case_create(dataset=six, title="New", turns=["hi"], expectations=[{"kind": "contains", "text": "x"}])
        b = _run(six, [P] * 7)
        rows = compare(a, b).rows
    assert rows[-1].title == "New" and rows[-1].change == Change.ONLY_B and rows[-1].a is None


def test_runs_of_two_datasets_are_not_compared(tenant, six, dataset):
    with tenant_scope(tenant), pytest.raises(ValueError, match="same dataset"):
        compare(_run(six, [P] * 6), _run(dataset, [P, P]))


def test_the_latest_finished_run_per_version_the_draft_first(tenant, eval_agent, six):
    with tenant_scope(tenant):
        first = eval_agent.published_version()
        second = agent_publish(agent=eval_agent, user=None)
        _run(six, [P] * 6, version=first)
        newest_first = _run(six, [F] * 6, version=first)
        _run(six, [P] * 6, version=second)
        draft = _run(six, [P] * 6)
        _run(six, [None] * 6, status=RunStatus.RUNNING)  # not finished: not shown
        runs = latest_runs(eval_agent)
    assert [run.version for run in runs] == [None, second, first]
    assert runs[0] == draft and runs[2] == newest_first

"""Two runs of one dataset side by side: each case's verdict change (fixed, broken, the same), pass rates, tokens
and mean latency; and the latest finished run of each version of an agent (its page shows them)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from django.utils.translation import gettext as _

from agents.models import Agent
from evals.models import CaseResult, ResultStatus, Run, RunStatus


class Change(StrEnum):
    """How a case changed from run a to run b."""

    FIXED = "fixed"  # failed (or broke) in a, passed in b
    BROKEN = "broken"  # passed in a, failed (or broke) in b
    SAME_PASS = "same_pass"  # noqa: S105 - a verdict, not a password
    SAME_FAIL = "same_fail"
    ONLY_A = "only_a"  # the case ran in a only (added or deleted between the runs, or b was stopped)
    ONLY_B = "only_b"


@dataclass
class CompareRow:
    case_id: int | None
    title: str
    a: CaseResult | None
    b: CaseResult | None
    change: Change


@dataclass
class Comparison:
    a: Run
    b: Run
    rows: list[CompareRow]
    fixed: int
    broken: int
    same: int
    pass_rate_a: float | None
    pass_rate_b: float | None
    tokens_a: int
    tokens_b: int
    latency_a_ms: float | None  # mean per case
    latency_b_ms: float | None


def _change(a: CaseResult | None, b: CaseResult | None) -> Change:
    if b is None:
        return Change.ONLY_A
    if a is None:
        return Change.ONLY_B
    passed_a, passed_b = a.status == ResultStatus.PASSED, b.status == ResultStatus.PASSED
    if passed_a and passed_b:
        return Change.SAME_PASS
    if passed_b:
        return Change.FIXED
    return Change.BROKEN if passed_a else Change.SAME_FAIL


def _mean_latency(results: list[CaseResult]) -> float | None:
    return sum(result.latency_ms for result in results) / len(results) if results else None


def compare(a: Run, b: Run) -> Comparison:
    """Runs `a` and `b` of the same dataset, case by case (in the dataset's order). ValueError when their datasets
    differ."""
    if a.dataset_id != b.dataset_id:
        raise ValueError(_("Only two runs of the same dataset can be compared."))
    results_a = list(CaseResult.objects.filter(run=a).select_related("case").order_by("position", "id"))
    results_b = list(CaseResult.objects.filter(run=b).select_related("case").order_by("position", "id"))
    by_case_b = {result.case_id: result for result in results_b if result.case_id is not None}
    rows: list[CompareRow] = []
    for result in results_a:
        other = by_case_b.pop(result.case_id, None) if result.case_id is not None else None
        rows.append(CompareRow(result.case_id, result.title, result, other, _change(result, other)))
    rows += [
        CompareRow(result.case_id, result.title, None, result, Change.ONLY_B)
        for result in results_b
        if result.case_id is None or result.case_id in by_case_b
    ]
    rows.sort(key=lambda row: ((row.a or row.b).position, row.case_id or 0))
    counts = {change: sum(row.change == change for row in rows) for change in Change}
    return Comparison(
        a=a,
        b=b,
        rows=rows,
        fixed=counts[Change.FIXED],
        broken=counts[Change.BROKEN],
        same=counts[Change.SAME_PASS] + counts[Change.SAME_FAIL],
        pass_rate_a=a.pass_rate,
        pass_rate_b=b.pass_rate,
        tokens_a=a.tokens + a.judge_tokens,
        tokens_b=b.tokens + b.judge_tokens,
        latency_a_ms=_mean_latency(results_a),
        latency_b_ms=_mean_latency(results_b),
    )


def latest_runs(agent: Agent) -> list[Run]:
    """The latest finished run of each version of `agent` (any dataset), the draft's first, then the newest
    version first."""
    finished = (RunStatus.DONE, RunStatus.STOPPED, RunStatus.FAILED)
    runs = Run.objects.filter(agent=agent, status__in=finished).select_related("version", "dataset").order_by("-id")
    latest: dict[int | None, Run] = {}
    for run in runs[:500]:
        latest.setdefault(run.version_id, run)
    return sorted(latest.values(), key=lambda run: -(run.version.number if run.version is not None else 1 << 30))

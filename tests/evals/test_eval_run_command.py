"""`manage.py eval_run`: runs in the foreground, prints progress and a summary, exits 0 at or above the threshold, 1
under it, 2 on bad arguments (another tenant's agent or dataset among them)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from evals.models import Run, RunStatus
from evals.runner import run_line
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)


def _call(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("eval_run", *args, stdout=out)
    except SystemExit as exit_:
        return int(exit_.code), out.getvalue()
    except CommandError as error:
        return error.returncode, str(error)
    return 0, out.getvalue()


def test_a_run_at_the_threshold_exits_0_and_prints_its_summary(tenant, tenant_admin, dataset):
    code, out = _call("--tenant", tenant.slug, "--agent", dataset.agent.name, "--dataset", "Basics")
    assert code == 0, out
    assert "2/2 passed (100%; needed 80%)" in out and out.rstrip().endswith("PASS")
    assert not run_line.pending  # in the foreground: nothing was queued
    with tenant_scope(tenant):
        run = Run.objects.get()
        assert run.status == RunStatus.DONE and run.version is None and run.started_by == tenant_admin


def test_under_the_threshold_it_exits_1_naming_the_failed_cases(tenant, tenant_admin, dataset, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Hello from the north."}})
    code, out = _call("--tenant", tenant.slug, "--agent", str(dataset.agent.pk), "--dataset", "Basics",
                      "--version", "published", "--threshold", "0.9", "--json")  # fmt: skip
    assert code == 1
    summary = json.loads(out)
    assert (summary["passed"], summary["failed"], summary["passed_threshold"]) == (1, 1, False)
    assert summary["results"][1] == {"position": summary["results"][1]["position"], "title": "Two turns",
                                     "status": "failed"}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"--tenant": "nope"}, "No tenant"),
        ({"--agent": "Nobody"}, "No agent"),
        ({"--agent": "Noodle chef"}, "No agent"),  # another tenant's agent
        ({"--dataset": "Theirs"}, "no dataset"),  # another tenant's dataset
        ({"--version": "7"}, "no version"),
        ({"--threshold": "1.5"}, "between 0 and 1"),
    ],
)
def test_bad_arguments_exit_2(change, words, tenant, tenant_admin, dataset, other_dataset):
    options = {"--tenant": tenant.slug, "--agent": dataset.agent.name, "--dataset": "Basics"} | change
    code, out = _call(*[part for pair in options.items() for part in pair])
    assert code == 2 and words in out
    with tenant_scope(tenant):
        assert not Run.objects.exists()


def test_a_budget_warning_exits_2_unless_confirmed(tenant, tenant_admin, dataset):
    tenant.monthly_token_budget = 10
    tenant.save(update_fields=["monthly_token_budget"])
    code, out = _call("--tenant", tenant.slug, "--agent", dataset.agent.name, "--dataset", "Basics")
    assert code == 2 and "--yes" in out
    code, out = _call("--tenant", tenant.slug, "--agent", dataset.agent.name, "--dataset", "Basics", "--yes")
    assert code == 1 and "Ended:" in out  # the budget ended it: not a pass, whatever the rate

"""Evaluation on the REST API (api.rest_evals): datasets, cases, import errors by line, export, runs (start, budget
warning, progress, results, stop), comparisons and cases from 👎 ratings. Owners and admins only; a key reads with
`read` and changes with `write`; another tenant's dataset, case, run or rating is a 404 and nothing of it changes."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from agents.services import agent_update, conversation_start
from api.keys import key_create
from api.models import KeyScope
from evals.models import Case, Dataset, Run, RunStatus
from evals.runner import run_line
from memory.feedback import feedback_record
from memory.services import message_add
from tenants.scope import tenant_scope
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _runs_end():
    yield
    run_line.wait(timeout=30)


def _key(tenant, user, *scopes: str) -> Client:
    with tenant_scope(tenant):
        _key, secret = key_create(tenant=tenant, user=user, name="ci", scopes=list(scopes))
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


@pytest.fixture
def api(tenant, tenant_admin) -> Client:
    return _key(tenant, tenant_admin, KeyScope.READ, KeyScope.WRITE)


def _finished(tenant, run_id: int) -> Run:
    assert run_line.wait(timeout=30)
    with tenant_scope(tenant):
        return Run.objects.get(pk=run_id)


def test_datasets_and_cases(api, tenant, eval_agent):
    made = api.post(f"/api/v1/agents/{eval_agent.pk}/eval-datasets/", {"name": "Roofs"}, "application/json")
    assert made.status_code == 201 and made.json()["agent"] == eval_agent.pk
    assert made.json()["case_count"] == 0  # as the schema says: every answer carries it, not only the list's
    dataset_id = made.json()["id"]
    empty = api.get(f"/api/v1/eval-datasets/{dataset_id}/export/")  # no cases: an empty body, still typed
    assert empty.status_code == 200 and empty.content == b""
    assert empty["Content-Type"] == "application/x-ndjson; charset=utf-8"
    again = api.post(f"/api/v1/agents/{eval_agent.pk}/eval-datasets/", {"name": "Roofs"}, "application/json")
    assert again.status_code == 400 and "name" in again.json()["error"]["fields"]
    listed = api.get(f"/api/v1/agents/{eval_agent.pk}/eval-datasets/").json()
    assert [(d["name"], d["case_count"]) for d in listed["results"]] == [("Roofs", 0)]

    case = {"title": "South", "turns": ["Which way?"], "expectations": [{"kind": "contains", "text": "south"}]}
    created = api.post(f"/api/v1/eval-datasets/{dataset_id}/cases/", case, "application/json")
    assert created.status_code == 201 and created.json()["expectations"][0]["kind"] == "contains"
    wrong = {"turns": ["Hi"], "expectations": [{"kind": "matches", "pattern": "("}]}
    refused = api.post(f"/api/v1/eval-datasets/{dataset_id}/cases/", wrong, "application/json")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "validation_error"
    case_id = created.json()["id"]
    changed = api.patch(f"/api/v1/eval-cases/{case_id}/", {"title": "Facing"}, "application/json")
    assert changed.status_code == 200 and changed.json()["title"] == "Facing"
    assert api.get(f"/api/v1/eval-datasets/{dataset_id}/cases/").json()["count"] == 1
    patched = api.patch(f"/api/v1/eval-datasets/{dataset_id}/", {"judge_prompt": "Be strict."}, "application/json")
    assert patched.status_code == 200 and patched.json()["judge_prompt"] == "Be strict."
    assert api.delete(f"/api/v1/eval-cases/{case_id}/").status_code == 204
    assert api.delete(f"/api/v1/eval-datasets/{dataset_id}/").status_code == 204
    with tenant_scope(tenant):
        assert not Dataset.objects.filter(pk=dataset_id).exists()


def test_import_errors_by_line_and_export(api, tenant, dataset):
    bad = b'{"turns": ["Hi"], "expectations": [{"kind": "contains", "text": "Hi"}]}\nnot json\n'
    response = api.post(f"/api/v1/eval-datasets/{dataset.pk}/import/", {"file": SimpleUploadedFile("a.jsonl", bad)})
    assert response.status_code == 400
    assert response.json()["created"] == 0 and [p["line"] for p in response.json()["problems"]] == [2]
    good = b"title,input,expected_contains\nSun,Is it sunny?,sun\n"
    response = api.post(f"/api/v1/eval-datasets/{dataset.pk}/import/", {"file": SimpleUploadedFile("a.csv", good)})
    assert response.status_code == 201 and response.json() == {"created": 1, "problems": []}

    jsonl = api.get(f"/api/v1/eval-datasets/{dataset.pk}/export/?format=jsonl")
    assert jsonl.status_code == 200 and jsonl["Content-Type"].startswith("application/x-ndjson")
    titles = [json.loads(line)["title"] for line in jsonl.content.decode().splitlines()]
    assert titles == ["Greets", "Two turns", "Sun"]
    csv = api.get(f"/api/v1/eval-datasets/{dataset.pk}/export/?format=csv")
    assert csv.status_code == 200 and csv["Content-Type"].startswith("text/csv") and b"Sun" in csv.content


def test_runs_progress_results_compare_and_stop(api, tenant, tenant_admin, eval_agent, dataset, scripted_llm):
    with tenant_scope(tenant):
        published = eval_agent.published_version()
    body = {"dataset": dataset.pk, "version": published.pk, "concurrency": 2}
    started = api.post("/api/v1/eval-runs/", body, "application/json")
    assert started.status_code == 201 and started.json()["version_number"] == published.number
    first = _finished(tenant, started.json()["id"])
    progress = api.get(f"/api/v1/eval-runs/{first.pk}/").json()
    assert progress["status"] == "done" and progress["finished"] and progress["pass_rate"] == 1.0
    assert [r["title"] for r in progress["results"]] == ["Greets", "Two turns"]
    results = api.get(f"/api/v1/eval-runs/{first.pk}/results/").json()["results"]
    assert results[0]["reply"] == "You said: Hello" and results[0]["verdicts"][0]["passed"] is True
    assert results[0]["conversation"] and results[0]["latency_ms"] > 0

    scripted_llm.set_rules({"when": {}, "reply": {"text": "Good day"}})
    with tenant_scope(tenant):
        agent_update(agent=eval_agent, system_prompt="Changed")
    started = api.post("/api/v1/eval-runs/", {"dataset": dataset.pk, "version": None}, "application/json")
    second = _finished(tenant, started.json()["id"])
    compared = api.get(f"/api/v1/eval-compare/?a={first.pk}&b={second.pk}").json()
    assert (compared["fixed"], compared["broken"], compared["same"]) == (0, 1, 1)
    assert compared["pass_rate_a"] == 1.0 and compared["pass_rate_b"] == 0.5
    broken = next(row for row in compared["rows"] if row["change"] == "broken")
    assert broken["a"]["reply"] == "You said: Hello" and broken["b"]["reply"] == "Good day"
    listed = api.get(f"/api/v1/eval-runs/?dataset={dataset.pk}").json()
    assert [run["id"] for run in listed["results"]] == [second.pk, first.pk]

    with tenant_scope(tenant):
        queued = Run.objects.create(tenant=tenant, dataset=dataset, agent=eval_agent, total=2, started_by=tenant_admin)
    stopped = api.post(f"/api/v1/eval-runs/{queued.pk}/stop/")
    assert stopped.status_code == 200 and stopped.json()["status"] == RunStatus.STOPPED


def test_a_run_over_the_budget_or_of_an_empty_dataset_is_a_conflict(api, tenant, eval_agent, dataset):
    tenant.monthly_token_budget = 1
    tenant.save(update_fields=["monthly_token_budget"])
    warned = api.post("/api/v1/eval-runs/", {"dataset": dataset.pk}, "application/json")
    assert warned.status_code == 409
    error = warned.json()["error"]
    assert error["code"] == "budget_warning" and error["estimate"] > error["remaining"]
    with tenant_scope(tenant):
        assert not Run.objects.exists()
    confirmed = api.post("/api/v1/eval-runs/", {"dataset": dataset.pk, "confirm_budget": True}, "application/json")
    assert confirmed.status_code == 201
    empty = api.post(f"/api/v1/agents/{eval_agent.pk}/eval-datasets/", {"name": "Empty"}, "application/json")
    refused = api.post("/api/v1/eval-runs/", {"dataset": empty.json()["id"]}, "application/json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "run_refused"


def _rated(tenant, agent, user, rating: int):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=agent, user=user)
        message_add(conversation=conversation, role="user", content="Which panel?")
        reply = message_add(conversation=conversation, role="assistant", content="Any.")
        return feedback_record(message=reply, user=user, rating=rating, comment="Name one", source="chat")


def test_a_thumbs_down_becomes_a_case_once(api, tenant, member, eval_agent):
    down = _rated(tenant, eval_agent, member, -1)  # an admin makes a case of anyone's rating in the tenant
    made = api.post(f"/api/v1/feedback/{down.pk}/eval-case/")
    assert made.status_code == 201 and made.json()["source"] == "feedback" and made.json()["feedback"] == down.pk
    assert made.json()["expectations"] == [{"kind": "rubric", "rubric": "Name one", "min_score": 4}]
    again = api.post(f"/api/v1/feedback/{down.pk}/eval-case/")
    assert again.status_code == 200 and again.json()["id"] == made.json()["id"]
    up = _rated(tenant, eval_agent, member, 1)
    assert api.post(f"/api/v1/feedback/{up.pk}/eval-case/").status_code == 400


def test_scopes_and_roles(tenant, tenant_admin, member, eval_agent, dataset, login):
    reader = _key(tenant, tenant_admin, KeyScope.READ)
    assert reader.get(f"/api/v1/eval-datasets/{dataset.pk}/cases/").status_code == 200
    refused = reader.post(f"/api/v1/agents/{eval_agent.pk}/eval-datasets/", {"name": "X"}, "application/json")
    assert refused.status_code == 403 and "write" in refused.json()["error"]["message"]
    assert reader.post("/api/v1/eval-runs/", {"dataset": dataset.pk}, "application/json").status_code == 403
    members_key = _key(tenant, member, KeyScope.READ, KeyScope.WRITE)
    assert members_key.get(f"/api/v1/eval-datasets/{dataset.pk}/").status_code in (403, 404)
    session = login(member, tenant)
    assert session.get(f"/api/v1/eval-datasets/{dataset.pk}/").status_code == 403
    assert session.get(f"/api/v1/agents/{eval_agent.pk}/eval-datasets/").status_code == 403
    with tenant_scope(tenant):
        assert Dataset.objects.count() == 1


def test_another_tenants_objects_are_not_found(api, tenant, eval_agent, other_tenant, other_agent, other_dataset):
    with tenant_scope(other_tenant):
        case = other_dataset.cases.first()
        run = Run.objects.create(tenant=other_tenant, dataset=other_dataset, agent=other_agent, total=2)
    theirs = _rated(other_tenant, other_agent, UserFactory(username="theirs"), -1)
    with tenant_scope(tenant):
        own_run = Run.objects.create(tenant=tenant, dataset=Dataset.objects.create(
            tenant=tenant, agent=eval_agent, name="Mine"), agent=eval_agent, total=0)  # fmt: skip
    for url in (
        f"/api/v1/agents/{other_agent.pk}/eval-datasets/", f"/api/v1/eval-datasets/{other_dataset.pk}/",
        f"/api/v1/eval-datasets/{other_dataset.pk}/cases/", f"/api/v1/eval-datasets/{other_dataset.pk}/export/",
        f"/api/v1/eval-cases/{case.pk}/", f"/api/v1/eval-runs/{run.pk}/", f"/api/v1/eval-runs/{run.pk}/results/",
        f"/api/v1/eval-compare/?a={run.pk}&b={own_run.pk}", f"/api/v1/eval-compare/?a={own_run.pk}&b={run.pk}",
    ):  # fmt: skip
        assert api.get(url).status_code == 404, url
    for url in (
        f"/api/v1/agents/{other_agent.pk}/eval-datasets/", f"/api/v1/eval-datasets/{other_dataset.pk}/cases/",
        f"/api/v1/eval-datasets/{other_dataset.pk}/import/", f"/api/v1/eval-runs/{run.pk}/stop/",
        f"/api/v1/feedback/{theirs.pk}/eval-case/",
    ):  # fmt: skip
        assert api.post(url, {"name": "x"}, "application/json").status_code == 404, url
    assert api.post("/api/v1/eval-runs/", {"dataset": other_dataset.pk}, "application/json").status_code == 404
    assert api.delete(f"/api/v1/eval-datasets/{other_dataset.pk}/").status_code == 404
    assert api.delete(f"/api/v1/eval-cases/{case.pk}/").status_code == 404
    with tenant_scope(other_tenant):
        assert other_dataset.cases.count() == 2 and Run.objects.filter(dataset=other_dataset).count() == 1
        assert not Run.objects.get(pk=run.pk).stop_requested and not Case.objects.filter(feedback__isnull=False)

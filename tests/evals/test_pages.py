"""The evaluation pages (evals.views): datasets, cases with the expectation editor, import errors by line, export,
runs with their live progress, stop, compare, the publish gate, the agent page's section and the chat's "make a
test case" button. Owners and admins only (members get the explanation page); another tenant's objects are 404."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents.services import agent_update, conversation_start
from evals.forms import KIND_FIELDS
from evals.models import Case, CaseSource, Dataset, ExpectationKind, Gate, Run, RunStatus
from evals.runner import run_line
from evals.services import dataset_create
from memory.feedback import feedback_record
from memory.services import message_add
from tenants.scope import tenant_scope
from tests.evals.conftest import make_agent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _runs_end():
    yield
    run_line.wait(timeout=30)  # nothing of a test runs on after it


@pytest.fixture
def admin_client(login, tenant_admin, tenant):
    return login(tenant_admin, tenant)


def _finished(run_id: int, tenant) -> Run:
    assert run_line.wait(timeout=30)
    with tenant_scope(tenant):
        return Run.objects.get(pk=run_id)


def _expectation_rows(*rows: dict) -> dict[str, str]:
    """The expectation editor's formset fields (prefix "expect") for `rows`."""
    data = {"expect-TOTAL_FORMS": str(len(rows)), "expect-INITIAL_FORMS": "0"}
    for index, row in enumerate(rows):
        for field, value in row.items():
            data[f"expect-{index}-{field}"] = value
    return data


def test_an_admin_makes_a_dataset_and_a_case_with_expectations_of_several_kinds(admin_client, tenant, eval_agent):
    page = admin_client.get(f"/evals/agents/{eval_agent.pk}/")
    assert page.status_code == 200 and b'id="no-datasets"' in page.content
    response = admin_client.post(f"/evals/agents/{eval_agent.pk}/new/", {"name": "Roofs", "description": "sun"})
    with tenant_scope(tenant):
        dataset = Dataset.objects.get(name="Roofs")
    assert response.status_code == 302 and response["Location"] == f"/evals/datasets/{dataset.pk}/"
    # The same name again is refused next to the name.
    again = admin_client.post(f"/evals/agents/{eval_agent.pk}/new/", {"name": "Roofs"})
    assert again.status_code == 200 and b'id="errors-name"' in again.content

    editor = admin_client.get(f"/evals/datasets/{dataset.pk}/cases/new/")
    assert editor.status_code == 200
    # Every kind's fields are in the page's script data (one declaration: evals.expectations.FIELDS).
    assert b'id="eval-kind-fields"' in editor.content and b"min_score" in editor.content
    rows = _expectation_rows(
        {"kind": "contains", "text": "south", "ignore_case": "on"},
        {"kind": "tool_called", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"kind": "rubric", "rubric": "Explains why", "min_score": "3"},
        {"kind": ""},  # an empty row is skipped
    )
    data = {"title": "Facing", "turns": "My roof faces south.\n---\nIs that good?", **rows}
    response = admin_client.post(f"/evals/datasets/{dataset.pk}/cases/new/", data)
    assert response.status_code == 302
    with tenant_scope(tenant):
        case = Case.objects.get(dataset=dataset)
    assert case.turns == ["My roof faces south.", "Is that good?"] and case.title == "Facing"
    assert [e["kind"] for e in case.expectations] == ["contains", "tool_called", "rubric"]
    assert case.expectations[1]["arguments"] == {"city": "Paris"} and case.expectations[2]["min_score"] == 3

    detail = admin_client.get(f"/evals/datasets/{dataset.pk}/")
    assert detail.status_code == 200 and f'id="case-{case.pk}"'.encode() in detail.content
    assert b"Explains why" in detail.content and b'id="judge-prompt-text"' in detail.content

    # Editing shows the stored expectations, JSON fields as JSON.
    edit = admin_client.get(f"/evals/cases/{case.pk}/")
    assert edit.status_code == 200 and b"&quot;city&quot;: &quot;Paris&quot;" in edit.content


def test_the_case_editor_says_what_is_wrong_next_to_the_field(admin_client, dataset):
    url = f"/evals/datasets/{dataset.pk}/cases/new/"
    bad_json = admin_client.post(url, {"turns": "Hi", **_expectation_rows({"kind": "json_schema", "schema": "{"})})
    assert bad_json.status_code == 200 and b'id="errors-expect-0-schema"' in bad_json.content
    bad_pattern = admin_client.post(url, {"turns": "Hi", **_expectation_rows({"kind": "matches", "pattern": "("})})
    assert bad_pattern.status_code == 200 and b'id="errors-expect-0-pattern"' in bad_pattern.content
    none = admin_client.post(url, {"turns": "Hi", **_expectation_rows({"kind": ""})})
    assert none.status_code == 200 and b'id="expectation-errors"' in none.content
    no_turn = admin_client.post(url, {"turns": "\n---\n", **_expectation_rows({"kind": "refusal"})})
    assert no_turn.status_code == 200 and b'id="errors-turns"' in no_turn.content
    with tenant_scope(dataset.tenant):
        assert dataset.cases.count() == 2  # nothing added


def test_deleting_asks_first(admin_client, tenant, dataset):
    with tenant_scope(tenant):
        case = dataset.cases.first()
    confirm = admin_client.get(f"/evals/cases/{case.pk}/delete/")
    assert confirm.status_code == 200 and b'id="confirm-button"' in confirm.content
    assert admin_client.post(f"/evals/cases/{case.pk}/delete/").status_code == 302
    confirm = admin_client.get(f"/evals/datasets/{dataset.pk}/delete/")
    assert confirm.status_code == 200 and b'id="confirm-consequence"' in confirm.content
    assert admin_client.post(f"/evals/datasets/{dataset.pk}/delete/").status_code == 302
    with tenant_scope(tenant):
        assert not Dataset.objects.filter(pk=dataset.pk).exists()


def test_an_import_with_problems_names_the_lines_and_stores_nothing(admin_client, tenant, dataset):
    bad = (
        b'{"turns": ["Hi"], "expectations": [{"kind": "contains", "text": "Hi"}]}\n{"turns": [], "expectations": []}\n'
    )
    response = admin_client.post(f"/evals/datasets/{dataset.pk}/import/", {"file": _upload("cases.jsonl", bad)})
    assert response.status_code == 400 and b'id="import-problems"' in response.content
    assert b"Line 2" in response.content
    with tenant_scope(tenant):
        assert dataset.cases.count() == 2
    good = b"title,input,expected_contains\nSun,Is it sunny?,sun\n"
    response = admin_client.post(f"/evals/datasets/{dataset.pk}/import/", {"file": _upload("cases.csv", good)})
    assert response.status_code == 302
    with tenant_scope(tenant):
        assert Case.objects.filter(dataset=dataset, source=CaseSource.IMPORT).count() == 1


def test_export_as_jsonl_and_csv(admin_client, dataset):
    jsonl = admin_client.get(f"/evals/datasets/{dataset.pk}/export/?format=jsonl")
    assert jsonl.status_code == 200 and jsonl["Content-Type"].startswith("application/x-ndjson")
    assert [json.loads(line)["title"] for line in jsonl.content.decode().splitlines()] == ["Greets", "Two turns"]
    csv = admin_client.get(f"/evals/datasets/{dataset.pk}/export/?format=csv")
    assert csv.status_code == 200 and "attachment" in csv["Content-Disposition"] and b"Greets" in csv.content
    assert admin_client.get(f"/evals/datasets/{dataset.pk}/export/?format=xml").status_code == 404


def _upload(name: str, content: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content)


def test_a_run_from_the_page_shows_progress_results_and_compares_with_another(
    admin_client, tenant, tenant_admin, eval_agent, dataset, scripted_llm
):
    with tenant_scope(tenant):
        published = eval_agent.published_version()
    response = admin_client.post(
        f"/evals/datasets/{dataset.pk}/run/", {"version": str(published.pk), "concurrency": "2"}
    )
    assert response.status_code == 302 and response["Location"].startswith("/evals/runs/")
    first = _finished(int(response["Location"].split("/")[3]), tenant)
    assert first.version_id == published.pk and first.status == RunStatus.DONE and first.concurrency == 2

    progress = admin_client.get(f"/evals/runs/{first.pk}/progress/").json()
    assert progress["finished"] and progress["done"] == 2 and progress["status_label"] == "done"
    assert [result["title"] for result in progress["results"]] == ["Greets", "Two turns"]
    page = admin_client.get(f"/evals/runs/{first.pk}/")
    assert page.status_code == 200 and b"You said: Hello" in page.content and b"conversation-link" in page.content
    assert b'data-finished="1"' in page.content and b'id="stop-run"' not in page.content

    # The draft now says something else: the first case breaks.
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Good day"}})
    with tenant_scope(tenant):
        agent_update(agent=eval_agent, system_prompt="Changed")
    response = admin_client.post(f"/evals/datasets/{dataset.pk}/run/", {"version": "draft", "concurrency": "4"})
    second = _finished(int(response["Location"].split("/")[3]), tenant)
    assert second.version_id is None and second.failed == 1

    compare = admin_client.get(f"/evals/compare/?a={first.pk}&b={second.pk}")
    assert compare.status_code == 200
    assert b'data-change="broken">1<' in compare.content and b'data-change="same">1<' in compare.content
    assert b"You said: Hello" in compare.content and b"Good day" in compare.content
    # The agent page shows the latest run per version, and offers the comparison.
    agent_page = admin_client.get(f"/agents/{eval_agent.pk}/")
    assert b'id="evaluation"' in agent_page.content and b'id="compare-latest"' in agent_page.content
    assert f'data-run="{second.pk}"'.encode() in agent_page.content


def test_a_run_over_the_budget_asks_first(admin_client, tenant, dataset):
    tenant.monthly_token_budget = 1
    tenant.save(update_fields=["monthly_token_budget"])
    response = admin_client.post(f"/evals/datasets/{dataset.pk}/run/", {"version": "draft", "concurrency": "1"})
    assert response.status_code == 409 and b'id="budget-warning"' in response.content
    assert b'name="confirm_budget" value="True"' in response.content
    with tenant_scope(tenant):
        assert not Run.objects.exists()
    confirmed = admin_client.post(
        f"/evals/datasets/{dataset.pk}/run/", {"version": "draft", "concurrency": "1", "confirm_budget": "True"}
    )
    assert confirmed.status_code == 302


def test_a_run_is_stopped_after_asking(admin_client, tenant, tenant_admin, dataset):
    with tenant_scope(tenant):
        run = Run.objects.create(tenant=tenant, dataset=dataset, agent=dataset.agent, total=2, started_by=tenant_admin)
    page = admin_client.get(f"/evals/runs/{run.pk}/")
    assert b'id="stop-run"' in page.content and b'data-finished=""' in page.content
    assert admin_client.get(f"/evals/runs/{run.pk}/stop/").status_code == 200
    assert admin_client.post(f"/evals/runs/{run.pk}/stop/").status_code == 302
    with tenant_scope(tenant):
        run.refresh_from_db()
    assert run.stop_requested and run.status == RunStatus.STOPPED


def test_the_publish_gate_settings(admin_client, tenant, eval_agent, dataset):
    url = f"/evals/agents/{eval_agent.pk}/gate/"
    refused = admin_client.post(url, {"enabled": "on", "threshold": "90"})
    assert refused.status_code == 200 and b'id="errors-dataset"' in refused.content
    assert admin_client.post(url, {"enabled": "on", "dataset": dataset.pk, "threshold": "90"}).status_code == 302
    with tenant_scope(tenant):
        gate = Gate.objects.get(agent=eval_agent)
    assert gate.enabled and gate.dataset_id == dataset.pk and gate.threshold == pytest.approx(0.9)
    assert b'value="90"' in admin_client.get(url).content


def test_members_get_the_explanation_and_no_section(login, member, tenant, eval_agent, dataset):
    client = login(member, tenant)
    for url in (
        f"/evals/agents/{eval_agent.pk}/",
        f"/evals/datasets/{dataset.pk}/",
        f"/evals/agents/{eval_agent.pk}/gate/",
    ):
        response = client.get(url)
        assert response.status_code == 403 and b'id="forbidden-reason"' in response.content
    assert b'id="evaluation"' not in client.get(f"/agents/{eval_agent.pk}/").content


def test_another_tenants_objects_are_not_found(admin_client, other_tenant, other_agent, other_dataset, tenant_admin):
    with tenant_scope(other_tenant):
        case = other_dataset.cases.first()
        run = Run.objects.create(tenant=other_tenant, dataset=other_dataset, agent=other_agent, total=2)
    gets = [
        f"/evals/agents/{other_agent.pk}/", f"/evals/agents/{other_agent.pk}/new/",
        f"/evals/agents/{other_agent.pk}/gate/",
        f"/evals/datasets/{other_dataset.pk}/", f"/evals/datasets/{other_dataset.pk}/edit/",
        f"/evals/datasets/{other_dataset.pk}/delete/", f"/evals/datasets/{other_dataset.pk}/export/",
        f"/evals/datasets/{other_dataset.pk}/cases/new/", f"/evals/cases/{case.pk}/", f"/evals/cases/{case.pk}/delete/",
        f"/evals/runs/{run.pk}/", f"/evals/runs/{run.pk}/progress/", f"/evals/runs/{run.pk}/stop/",
        f"/evals/compare/?a={run.pk}&b={run.pk}",
    ]  # fmt: skip
    for url in gets:
        assert admin_client.get(url).status_code == 404, url
    posts = [
        f"/evals/datasets/{other_dataset.pk}/run/", f"/evals/datasets/{other_dataset.pk}/delete/",
        f"/evals/datasets/{other_dataset.pk}/import/", f"/evals/cases/{case.pk}/delete/", f"/evals/runs/{run.pk}/stop/",
    ]  # fmt: skip
    for url in posts:
        assert admin_client.post(url, {"version": "draft", "concurrency": "1"}).status_code == 404, url
    with tenant_scope(other_tenant):
        assert Dataset.objects.filter(pk=other_dataset.pk).exists() and other_dataset.cases.count() == 2
        assert Run.objects.filter(dataset=other_dataset).count() == 1 and not Run.objects.get(pk=run.pk).stop_requested


def _rated_reply(tenant, agent, user, rating: int, comment: str = ""):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=agent, user=user)
        message_add(conversation=conversation, role="user", content="What size of panel?")
        reply = message_add(conversation=conversation, role="assistant", content="Big.")
        feedback_record(message=reply, user=user, rating=rating, comment=comment, source="chat")
        return conversation, reply


def test_the_chat_button_makes_a_case_of_a_thumbs_down_once(admin_client, tenant, tenant_admin, eval_agent):
    conversation, reply = _rated_reply(tenant, eval_agent, tenant_admin, -1, "Say which size, in watts")
    page = admin_client.get(f"/chat/{conversation.pk}/")
    assert b'class="chat-feedback-case' in page.content and b"/evals/messages/0/case/" in page.content
    made = admin_client.post(f"/evals/messages/{reply.pk}/case/")
    assert made.status_code == 200
    body = made.json()
    with tenant_scope(tenant):
        case = Case.objects.get(pk=body["case"])
    assert case.source == CaseSource.FEEDBACK and case.turns == ["What size of panel?"]
    assert case.expectations[0]["rubric"] == "Say which size, in watts" and body["url"] == f"/evals/cases/{case.pk}/"
    assert admin_client.post(f"/evals/messages/{reply.pk}/case/").json()["case"] == case.pk  # once


def test_the_chat_button_refuses_a_thumbs_up_and_others_ratings(login, tenant, tenant_admin, member, eval_agent):
    _conversation, liked = _rated_reply(tenant, eval_agent, tenant_admin, 1)
    client = login(tenant_admin, tenant)
    assert client.post(f"/evals/messages/{liked.pk}/case/").status_code == 400
    conversation, theirs = _rated_reply(tenant, eval_agent, member, -1)
    assert client.post(f"/evals/messages/{theirs.pk}/case/").status_code == 404  # not the viewer's rating
    member_client = login(member, tenant)
    assert member_client.post(f"/evals/messages/{theirs.pk}/case/").status_code == 403
    assert b"chat-feedback-case" not in member_client.get(f"/chat/{conversation.pk}/").content
    with tenant_scope(tenant):
        assert not Case.objects.exists()


def test_the_kind_fields_cover_every_kind():
    assert set(KIND_FIELDS) == set(ExpectationKind.values)


def test_a_dataset_of_another_agent_is_not_listed(admin_client, tenant, eval_agent, eval_provider):
    with tenant_scope(tenant):
        second = make_agent(tenant, eval_provider, name="Second")
        dataset_create(agent=second, name="Elsewhere")
    assert b"Elsewhere" not in admin_client.get(f"/evals/agents/{eval_agent.pk}/").content

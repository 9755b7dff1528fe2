"""Datasets, cases and the publish gate through evals.services (issue 39): validation with words naming the field,
a case from a 👎 reply (once per rating), and another tenant's dataset, case, agent or rating refused as not found."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents.services import conversation_start
from evals.models import Case, CaseSource, Dataset, Gate, Run
from evals.services import (
    FEEDBACK_DATASET_NAME,
    FEEDBACK_TURNS,
    case_create,
    case_delete,
    case_from_feedback,
    case_update,
    cases_import,
    dataset_create,
    dataset_delete,
    dataset_update,
    gate_update,
)
from memory.feedback import feedback_record
from memory.services import message_add
from tenants.scope import tenant_scope
from tests.evals.conftest import make_agent

pytestmark = pytest.mark.django_db

CONTAINS = [{"kind": "contains", "text": "sun"}]


def test_a_case_is_stored_validated_and_normalized(tenant, dataset):
    with tenant_scope(tenant):
        case = case_create(dataset=dataset, turns=[" Hi ", "Sunny?"], expectations=CONTAINS, title=" Weather ")
        assert (case.title, case.turns, case.position, case.source) == ("Weather", ["Hi", "Sunny?"], 2, "manual")
        assert case.expectations == [{"kind": "contains", "text": "sun", "ignore_case": True}]
        assert case_create(dataset=dataset, turns="One turn", expectations=CONTAINS).turns == ["One turn"]


@pytest.mark.parametrize(
    ("turns", "expectations", "field", "words"),
    [
        ([], CONTAINS, "turns", "at least one user turn"),
        (["Hi", "  "], CONTAINS, "turns", "no empty turn"),
        ([1], CONTAINS, "turns", "list of texts"),
        (["Hi"], [], "expectations", "at least one expectation"),
        (["Hi"], [CONTAINS[0], {"kind": "matches", "pattern": "("}], "expectations", "Expectation 2:"),
    ],
)
def test_a_bad_case_is_refused_naming_the_field(tenant, dataset, turns, expectations, field, words):
    with tenant_scope(tenant):
        with pytest.raises(ValidationError) as raised:
            case_create(dataset=dataset, turns=turns, expectations=expectations)
        assert words in " ".join(raised.value.message_dict[field])
        assert Case.objects.filter(dataset=dataset).count() == 2


def test_update_and_delete(tenant, dataset):
    with tenant_scope(tenant):
        case = dataset.cases.first()
        case = case_update(case=case, title="New", expectations=[{"kind": "refusal"}])
        assert Case.objects.get(pk=case.pk).expectations == [{"kind": "refusal"}]
        with pytest.raises(ValidationError):
            case_update(case=case, turns=[])
        with pytest.raises(TypeError):
            case_update(case=case, dataset=dataset)
        case_delete(case=case)
        assert dataset.cases.count() == 1
        assert dataset_update(dataset=dataset, name=" Renamed ", judge_prompt="Be strict.").name == "Renamed"
        with pytest.raises(ValidationError) as raised:
            dataset_create(agent=dataset.agent, name="Renamed")
        assert "name" in raised.value.message_dict
        dataset_delete(dataset=dataset)
        assert not Dataset.objects.exists()


def test_import_is_all_or_nothing(tenant, dataset):
    good = (
        b'{"turns": ["Hi"], "expectations": [{"kind": "question"}]}\n'
        b'{"input": "Yo", "expectations": [{"kind": "refusal"}]}\n'
    )
    with tenant_scope(tenant):
        result = cases_import(dataset=dataset, data=good, filename="cases.jsonl")
        assert (result.created, result.problems) == (2, [])
        assert list(dataset.cases.values_list("position", "source")) == [(0, "manual"), (1, "manual"),
                                                                         (2, "import"), (3, "import")]  # fmt: skip
        bad = good + b'{"turns": ["Hi"], "expectations": [{"kind": "contains"}]}\n'
        result = cases_import(dataset=dataset, data=bad, filename="cases.jsonl")
        assert result.created == 0 and [(p.line, p.field) for p in result.problems] == [(3, "expectations[1].text")]
        assert dataset.cases.count() == 4


def _rated(tenant, agent, user, *, rating=-1, comment="Say which direction.", turns=2):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=agent, user=user)
        for number in range(turns):
            message_add(conversation=conversation, role="user", content=f"Question {number}")
            reply = message_add(conversation=conversation, role="assistant", content=f"Answer {number}")
        message_add(conversation=conversation, role="user", content="After the rated reply")
        return feedback_record(message=reply, user=user, rating=rating, comment=comment, source="chat")


def test_a_thumbs_down_becomes_a_case_once(tenant, eval_agent, member, tenant_admin):
    feedback = _rated(tenant, eval_agent, member, turns=FEEDBACK_TURNS + 2)
    with tenant_scope(tenant):
        case = case_from_feedback(feedback=feedback, user=tenant_admin)
        assert case.dataset.name == FEEDBACK_DATASET_NAME and case.dataset.agent == eval_agent
        assert case.source == CaseSource.FEEDBACK and case.feedback == feedback
        # The newest user messages up to the rated reply, oldest first; nothing after it.
        assert case.turns == [f"Question {n}" for n in range(2, FEEDBACK_TURNS + 2)]
        assert case.expectations == [{"kind": "rubric", "rubric": "Say which direction.", "min_score": 4}]
        assert case_from_feedback(feedback=feedback, user=tenant_admin) == case
        assert Case.objects.count() == 1 and Dataset.objects.filter(name=FEEDBACK_DATASET_NAME).count() == 1


def test_without_a_comment_the_rubric_quotes_the_rated_reply(tenant, eval_agent, member, tenant_admin, dataset):
    feedback = _rated(tenant, eval_agent, member, comment="", turns=1)
    with tenant_scope(tenant):
        case = case_from_feedback(feedback=feedback, user=tenant_admin, dataset=dataset)
        assert case.dataset == dataset
        assert "“Answer 0”" in case.expectations[0]["rubric"]


def test_a_thumbs_up_or_another_agents_dataset_is_refused(tenant, eval_agent, eval_provider, member, tenant_admin):
    up = _rated(tenant, eval_agent, member, rating=1)
    with tenant_scope(tenant), pytest.raises(ValidationError) as raised:
        case_from_feedback(feedback=up, user=tenant_admin)
    assert "👎" in raised.value.message_dict["feedback"][0]
    down = _rated(tenant, eval_agent, member)
    elsewhere = make_agent(tenant, eval_provider, name="Other agent")
    with tenant_scope(tenant):
        foreign = dataset_create(agent=elsewhere, name="Theirs")
        with pytest.raises(ValidationError):
            case_from_feedback(feedback=down, user=tenant_admin, dataset=foreign)
        assert not Case.objects.exists()


def test_the_gate(tenant, eval_agent, dataset, eval_provider):
    with tenant_scope(tenant):
        gate = gate_update(agent=eval_agent, enabled=True, dataset=dataset, threshold=0.9)
        assert (gate.enabled, gate.dataset, gate.threshold) == (True, dataset, 0.9)
        assert gate_update(agent=eval_agent, enabled=False, dataset=None, threshold=0.5).pk == gate.pk
        assert Gate.objects.count() == 1
        for threshold in (1.5, -0.1, "much"):
            with pytest.raises(ValidationError) as raised:
                gate_update(agent=eval_agent, enabled=True, dataset=dataset, threshold=threshold)
            assert "threshold" in raised.value.message_dict
        with pytest.raises(ValidationError):
            gate_update(agent=eval_agent, enabled=True, dataset=None, threshold=0.5)
    other = make_agent(tenant, eval_provider, name="Second")
    with tenant_scope(tenant), pytest.raises(ValidationError) as raised:
        gate_update(agent=other, enabled=True, dataset=dataset, threshold=0.5)
    assert "dataset" in raised.value.message_dict


def test_another_tenants_objects_are_refused_as_not_found(tenant, dataset, other_dataset, other_agent, tenant_admin):
    with tenant_scope(other_dataset.tenant):
        their_case = other_dataset.cases.first()
    with tenant_scope(tenant):
        refusals = [
            lambda: case_create(dataset=other_dataset, turns=["x"], expectations=CONTAINS),
            lambda: case_update(case=their_case, title="mine"),
            lambda: case_delete(case=their_case),
            lambda: dataset_update(dataset=other_dataset, name="mine"),
            lambda: dataset_delete(dataset=other_dataset),
            lambda: dataset_create(agent=other_agent, name="mine"),
            lambda: cases_import(
                dataset=other_dataset, data=b'{"input":"x","expectations":[{"kind":"refusal"}]}', filename="x.jsonl"
            ),
            lambda: gate_update(agent=other_agent, enabled=False, dataset=None, threshold=0.5),
            lambda: gate_update(agent=dataset.agent, enabled=True, dataset=other_dataset, threshold=0.5),
        ]
        for refused in refusals:
            with pytest.raises(Exception) as raised:
                refused()
            assert type(raised.value).__name__ == "DoesNotExist", raised.value
    with tenant_scope(other_dataset.tenant):
        assert other_dataset.cases.count() == 2 and Dataset.objects.get(pk=other_dataset.pk).name == "Theirs"


# The admin: datasets with their cases, runs read-only, and the feedback list's action.


def _inline_post(dataset, **case) -> dict:
    data = {
        "agent": dataset.agent_id, "name": dataset.name, "description": "", "judge_prompt": "",
        "cases-TOTAL_FORMS": "1", "cases-INITIAL_FORMS": "0", "cases-MIN_NUM_FORMS": "0", "cases-MAX_NUM_FORMS": "1000",
        "cases-0-position": "5", "cases-0-title": "New", "cases-0-dataset": str(dataset.pk),
    }  # fmt: skip
    data.update({f"cases-0-{key}": value for key, value in case.items()})
    return data


def test_the_admin_edits_cases_validated(login, tenant, tenant_admin, dataset):
    client = login(tenant_admin, tenant)
    url = reverse("admin:evals_dataset_change", args=[dataset.pk])
    page = client.get(url)
    assert page.status_code == 200 and "Greets" in page.content.decode()
    bad = client.post(url, _inline_post(dataset, turns='["Hi"]', expectations='[{"kind": "contains"}]'))
    assert bad.status_code == 200 and "Expectation 1: The field &#x27;text&#x27; is required." in bad.content.decode()
    good = client.post(url, _inline_post(dataset, turns='["Hi"]', expectations='[{"kind": "question"}]'))
    assert good.status_code == 302
    with tenant_scope(tenant):
        assert dataset.cases.get(title="New").expectations == [{"kind": "question"}]


def test_the_admin_shows_only_the_tenants_datasets_runs_and_gates(login, tenant, tenant_admin, dataset, other_dataset):
    with tenant_scope(other_dataset.tenant):
        run = Run.objects.create(tenant=other_dataset.tenant, dataset=other_dataset, agent=other_dataset.agent)
        gate = gate_update(agent=other_dataset.agent, enabled=True, dataset=other_dataset, threshold=0.5)
        their_case = other_dataset.cases.first()
    client = login(tenant_admin, tenant)
    listing = client.get(reverse("admin:evals_dataset_changelist")).content.decode()
    assert "Basics" in listing and "Theirs" not in listing
    for url in (
        reverse("admin:evals_dataset_change", args=[other_dataset.pk]),
        reverse("admin:evals_dataset_delete", args=[other_dataset.pk]),
        reverse("admin:evals_run_change", args=[run.pk]),
        reverse("admin:evals_gate_change", args=[gate.pk]),
    ):
        response = client.get(url, follow=True)
        assert response.redirect_chain and "Theirs" not in response.content.decode(), url
    # Posting their dataset's id as the parent of a new case changes nothing.
    client.post(reverse("admin:evals_dataset_change", args=[other_dataset.pk]),
                _inline_post(other_dataset, turns='["x"]', expectations='[{"kind": "refusal"}]'))  # fmt: skip
    with tenant_scope(other_dataset.tenant):
        assert other_dataset.cases.count() == 2 and Case.objects.get(pk=their_case.pk).title == "Greets"
    assert client.get(reverse("admin:evals_run_add")).status_code == 403


def test_the_feedback_action_makes_cases_of_the_tenants_thumbs_down(
    login, tenant, tenant_admin, member, eval_agent, other_agent, other_tenant, other_tenant_admin
):
    down = _rated(tenant, eval_agent, member)
    up = _rated(tenant, eval_agent, member, rating=1)
    theirs = _rated(other_tenant, other_agent, other_tenant_admin)
    client = login(tenant_admin, tenant)
    response = client.post(
        reverse("admin:memory_feedback_changelist"),
        {"action": "make_eval_cases", "_selected_action": [down.pk, up.pk, theirs.pk]},
        follow=True,
    )
    body = response.content.decode()
    assert "Made 1 evaluation case" in body and "1 selected rating was skipped" in body
    with tenant_scope(tenant):
        assert list(Case.objects.values_list("feedback_id", flat=True)) == [down.pk]
    with tenant_scope(other_tenant):
        assert not Case.objects.exists()


@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b"], ids=["NUL", "lone surrogate"])
def test_text_that_postgresql_cannot_store_is_refused_by_every_way_in(tenant, dataset, bad):
    """A NUL character or a lone surrogate is refused, naming the field, on every database (PostgreSQL would fail
    at the insert; SQLite would store it)."""
    with tenant_scope(tenant):
        expect = [{"kind": "contains", "text": "ok"}]
        for fields, name in [
            ({"turns": [bad], "expectations": expect}, "turns"),
            ({"turns": ["hi"], "expectations": [{"kind": "contains", "text": bad}]}, "expectations"),
            ({"turns": ["hi"], "expectations": expect, "title": bad}, "title"),
        ]:
            with pytest.raises(ValidationError) as refused:
                case_create(dataset=dataset, **fields)
            assert name in refused.value.message_dict
        with pytest.raises(ValidationError) as refused:
            dataset_update(dataset=dataset, description=bad)
        assert "description" in refused.value.message_dict
        line = json.dumps({"title": bad, "turns": [bad], "expectations": expect})
        result = cases_import(dataset=dataset, data=line.encode("utf-8", "surrogatepass"), filename="cases.jsonl")
        assert result.created == 0 and {problem.field for problem in result.problems} >= {"title", "turns"}

"""A member reads what they typed, not what another member typed (the probe's finding: workflow run logs and plan
step records were open to every member of the tenant). Administrators read everything of their tenant."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.services import agent_create, conversation_start
from agents.workflows.services import workflow_run_record, workflow_save
from plans import services as plan_services
from plans.models import StepRecord
from tenants.models import Role
from tenants.scope import tenant_scope
from tests.agents.factories import echo_workflow_yaml
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db

WORKFLOW = echo_workflow_yaml("Quote flow")


@pytest.fixture
def two_members(tenant, member):
    colleague = MembershipFactory(tenant=tenant, role=Role.MEMBER).user
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Quoter", kind="planner")
        workflow = workflow_save(tenant=tenant, yaml_text=WORKFLOW)
        made = {}
        for user, secret in ((member, "my own words"), (colleague, "colleague's salary 9000")):
            conversation = conversation_start(agent=agent, user=user)
            run = workflow_run_record(workflow=workflow, status="completed", inputs={"question": secret},
                                      outputs={}, log=[{"step": "start", "output": secret}],
                                      conversation_id=conversation.pk)  # fmt: skip
            plan = plan_services.plan_create(
                conversation=conversation, name="p", user_query=secret, allow_concurrency=False,
                steps=[{"seqNo": 0, "agentName": "Quoter", "requirement": "r"}],
            )  # fmt: skip
            record = StepRecord.objects.create(tenant=tenant, step=plan.steps.get(), content=secret)
            made[user.pk] = {"run": run, "record": record}
    return workflow, made, colleague


def test_a_member_sees_only_their_own_workflow_runs(login, tenant, member, two_members):
    workflow, made, colleague = two_members
    client = login(member, tenant)
    listing = client.get(reverse("agents:workflows:runs", args=[workflow.pk])).content.decode()
    theirs = made[colleague.pk]["run"]
    assert reverse("agents:workflows:run", args=[workflow.pk, made[member.pk]["run"].pk]) in listing
    assert reverse("agents:workflows:run", args=[workflow.pk, theirs.pk]) not in listing
    assert client.get(reverse("agents:workflows:run", args=[workflow.pk, theirs.pk])).status_code == 404
    mine = made[member.pk]["run"]
    assert client.get(reverse("agents:workflows:run", args=[workflow.pk, mine.pk])).status_code == 200


def test_a_member_opens_only_their_own_step_records(login, tenant, member, two_members):
    _workflow, made, colleague = two_members
    client = login(member, tenant)
    theirs = made[colleague.pk]["record"]
    assert client.get(reverse("plans:record", args=[theirs.recordId])).status_code == 404
    mine = made[member.pk]["record"]
    assert "my own words" in client.get(reverse("plans:record", args=[mine.recordId])).content.decode()


def test_administrators_read_every_run_and_record(login, tenant, tenant_admin, two_members):
    workflow, made, colleague = two_members
    client = login(tenant_admin, tenant)
    listing = client.get(reverse("agents:workflows:runs", args=[workflow.pk])).content.decode()
    assert all(reverse("agents:workflows:run", args=[workflow.pk, m["run"].pk]) in listing for m in made.values())
    theirs = made[colleague.pk]["record"]
    assert "9000" in client.get(reverse("plans:record", args=[theirs.recordId])).content.decode()

"""The plans admin (O1): a tenant admin sees their plan with its steps and logs; another tenant's plan is refused."""

import pytest
from django.urls import reverse

from agents.services import agent_create, conversation_start
from plans import services
from plans.models import LogKind
from tenants.models import Role
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def make_plan(tenant, name, *, user=None):
    """A stored plan with two steps and a tool-call log row, in `tenant`."""
    with tenant_scope(tenant):
        user = user or MembershipFactory(tenant=tenant, role=Role.MEMBER, user=UserFactory()).user
        agent_create(tenant=tenant, name=f"{name} agent", description="d")
        planner = agent_create(tenant=tenant, name=f"{name} planner", kind="planner")
        conversation = conversation_start(agent=planner, user=user)
        steps = [
            {"seqNo": 0, "agentName": f"{name} agent", "requirement": f"{name} first requirement"},
            {"seqNo": 1, "agentName": f"{name} agent", "requirement": "second", "depends_on": [0]},
        ]
        plan = services.plan_create(
            conversation=conversation, name=name, user_query="q", steps=steps, allow_concurrency=False
        )
        step = plan.steps.get(seqNo=0)
        result = {"recordId": "r", "output": f"{name} output", "status": "completed", "context": {}}
        services.step_update(step=step, status="completed", result=result)
        services.plan_log(plan=plan, kind=LogKind.TOOL_CALL, step=0, data={"name": f"{name}_tool", "arguments": {}})
        return plan


def test_a_tenant_admin_sees_their_plan_steps_and_logs(login, tenant_admin, tenant, other_tenant):
    mine = make_plan(tenant, "Solar")
    make_plan(other_tenant, "Noodle")
    client = login(tenant_admin, tenant)
    listing = client.get(reverse("admin:plans_plan_changelist")).content.decode()
    assert "Solar" in listing and "Noodle" not in listing
    page = client.get(reverse("admin:plans_plan_change", args=[mine.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    assert "Solar first requirement" in body and "Solar output" in body and "Solar_tool" in body


def test_another_tenants_plan_is_refused_in_the_admin(login, tenant_admin, tenant, other_tenant):
    theirs = make_plan(other_tenant, "Noodle")
    client = login(tenant_admin, tenant)
    response = client.get(reverse("admin:plans_plan_change", args=[theirs.pk]), follow=True)
    assert response.redirect_chain or response.status_code == 404
    assert "Noodle first requirement" not in response.content.decode()

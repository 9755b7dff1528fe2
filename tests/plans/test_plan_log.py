"""O1 on the plan card: the plan's log (states, model calls, tool calls) for the tenant's owners and admins only,
linked from the plan card in the chat page; members are refused, another tenant's plan is not found."""

import pytest
from django.urls import reverse

from plans import services
from plans.models import LogKind
from tenants.scope import tenant_scope
from tests.plans.test_plan_admin import make_plan

pytestmark = pytest.mark.django_db


def _logged_plan(tenant, name, **kwargs):
    plan = make_plan(tenant, name, **kwargs)
    with tenant_scope(tenant):
        services.plan_log(plan=plan, kind=LogKind.STATE, step=1, data={"event": "before_step", "plan": {"x": 1}})
        services.plan_log(plan=plan, kind=LogKind.MODEL_CALL, step=1,
                          data={"role": "step", "usage": {"prompt_tokens": 12, "completion_tokens": 3}})  # fmt: skip
        services.plan_log(plan=plan, kind=LogKind.MODEL_CALL, data={"role": "finalizer", "call_id": 77})
    return plan


def _log_url(plan, step=None):
    url = reverse("plans:log", kwargs={"plan_id": plan.planId})
    return url if step is None else f"{url}?step={step}"


def test_a_tenant_admin_reads_the_whole_log_and_one_steps_rows(login, tenant, tenant_admin):
    plan = _logged_plan(tenant, "Solar")
    client = login(tenant_admin, tenant)
    page = client.get(_log_url(plan))
    assert page.status_code == 200
    entries = page.context["entries"]
    kinds = [(entry.log.kind, entry.step) for entry in entries]
    assert (LogKind.TOOL_CALL, 0) in kinds and (LogKind.MODEL_CALL, None) in kinds and (LogKind.STATE, 1) in kinds
    body = page.content.decode()
    assert "Solar_tool(" in body and "finalizer · call 77" in body and "step · 12 + 3 tokens" in body
    assert "before_step" in body and "Solar output" in body  # the state rows carry the step results

    one = client.get(_log_url(plan, 1))
    assert one.status_code == 200 and {entry.step for entry in one.context["entries"]} == {1}
    assert [entry.summary for entry in one.context["entries"]] == ["before_step", "step · 12 + 3 tokens"]


def test_members_are_refused_the_log(login, tenant, member):
    plan = _logged_plan(tenant, "Solar", user=member)
    response = login(member, tenant).get(_log_url(plan))
    assert response.status_code == 403 and "Solar_tool" not in response.content.decode()


def test_another_tenants_plan_log_is_not_found(login, tenant, tenant_admin, other_tenant, other_tenant_admin):
    theirs = _logged_plan(other_tenant, "Noodle")
    response = login(tenant_admin, tenant).get(_log_url(theirs))
    assert response.status_code == 404 and "Noodle_tool" not in response.content.decode()
    assert login(other_tenant_admin, other_tenant).get(_log_url(theirs)).status_code == 200


def test_anonymous_visitors_are_sent_to_log_in(client, tenant):
    plan = _logged_plan(tenant, "Solar")
    response = client.get(_log_url(plan))
    assert response.status_code == 302 and "login" in response["Location"]


def test_the_plan_card_links_to_the_log_for_admins_only(login, tenant, tenant_admin, member):
    plan = _logged_plan(tenant, "Solar", user=member)
    chat = reverse("chat:conversation", args=[plan.conversation_id])
    admin_page = login(tenant_admin, tenant).get(chat).content.decode()
    assert f'class="chat-plan-log" target="_blank" rel="noopener" href="{_log_url(plan)}"' in admin_page
    assert f'href="{_log_url(plan, 0)}"' in admin_page and f'href="{_log_url(plan, 1)}"' in admin_page
    assert "data-log-template=" in admin_page

    member_page = login(member, tenant).get(chat).content.decode()
    assert "Solar first requirement" in member_page  # the member sees the plan, not its log
    assert "chat-plan-log" not in member_page and "chat-step-log" not in member_page
    assert "data-log-template" not in member_page and str(plan.planId) + "/log/" not in member_page

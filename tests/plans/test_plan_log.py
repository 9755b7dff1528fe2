"""O1 on the plan card: the plan's log (states, model calls, tool calls) for the tenant's owners and admins only,
linked from the plan card in the chat page; members are refused, another tenant's plan is not found."""

from functools import partial

import pytest
from django.urls import reverse
from django.utils import translation

from agents.models import Agent
from agents.services import conversation_start
from plans import services
from plans.models import LogKind, Plan, PlanStatus, StepStatus
from plans.selectors import access_plan, plans_readable
from tenants.models import Membership
from tenants.scope import tenant_scope
from tests.plans.test_plan_admin import make_plan

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(client):
    """Assertions read the English source strings unless a test asks for zh-hans (the site's default)."""
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"


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
    # A tool no registry knows is named by its identifier, as code.
    assert 'title="Solar_tool">Tool “<code>Solar_tool</code>” running…</span>' in body
    assert "final summary · call 77" in body
    assert "step agent · Tokens: 12 prompt + 3 completion" in body
    assert "before the step" in body and "completed → Solar output" in body  # state rows carry the step results

    one = client.get(_log_url(plan, 1))
    assert one.status_code == 200 and {entry.step for entry in one.context["entries"]} == {1}
    assert [entry.summary for entry in one.context["entries"]] == [
        "before the step",
        "step agent · Tokens: 12 prompt + 3 completion",
    ]


def test_state_names_are_the_models_labels_in_the_readers_language(login, tenant, tenant_admin):
    plan = _logged_plan(tenant, "Solar")
    with tenant_scope(tenant):
        services.plan_set_status(plan=plan, status=PlanStatus.INTERRUPTED)
    client = login(tenant_admin, tenant)
    english = client.get(_log_url(plan)).content.decode()
    assert "<summary>plan created · in progress</summary>" in english
    # The chat's words: a plan or step that asked the user waits for their answer (not "interrupted").
    assert "<summary>Waiting for your answer</summary>" in english
    assert "Status: <strong>Waiting for your answer</strong>" in english

    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "zh-hans"
    page = client.get(_log_url(plan))
    chinese = page.content.decode()
    summaries = [entry.summary for entry in page.context["entries"] if entry.log.kind == LogKind.STATE]
    with translation.override("zh-hans"):
        completed = str(StepStatus.COMPLETED.label)
    assert summaries[-1] == "等待你的回答" and "已中断" not in chinese
    assert f"<summary>{completed} → Solar output</summary>" in chinese  # a step's state row, with its result
    assert not [line for line in summaries if "running" in line or "interrupted" in line or "completed" in line]


def test_the_data_is_indented_json_in_a_collapsed_row(login, tenant, tenant_admin):
    plan = _logged_plan(tenant, "Solar")
    with tenant_scope(tenant):
        services.plan_log(plan=plan, kind=LogKind.TOOL_CALL, step=1,
                          data={"name": "pv_economics", "arguments": {"location": "杭州余杭区"}})  # fmt: skip
    page = login(tenant_admin, tenant).get(_log_url(plan))
    body = page.content.decode()
    entry = next(entry for entry in page.context["entries"] if entry.log.data.get("name") == "pv_economics")
    assert entry.data_json == '{\n  "name": "pv_economics",\n  "arguments": {\n    "location": "杭州余杭区"\n  }\n}'
    # The tool by its label as the chat names it, its arguments as fields (the argument's name is code).
    call = (
        '<span class="plan-tool-line" title="pv_economics">Tool “PV economics” running…</span> '
        '<span class="plan-fields"><span class="plan-field"><code>location</code>: 杭州余杭区</span></span>'
    )
    assert f"<details><summary>{call}</summary>" in body
    assert '<pre class="plan-log-data">{\n  &quot;name&quot;' in body and "\\u676d" not in body
    assert "css/plans.css" in body  # the table's columns: one line each but the wide one (static/css/plans.css)


def test_each_step_links_to_its_agents_internal_conversation(login, tenant, tenant_admin):
    plan = _logged_plan(tenant, "Solar")
    with tenant_scope(tenant):
        agent = Agent.objects.get(name="Solar agent")
        step_conversation = conversation_start(agent=agent, user=plan.conversation.user, parent=plan.conversation)
        elsewhere = conversation_start(agent=agent, user=plan.conversation.user)  # not this plan's
    page = login(tenant_admin, tenant).get(_log_url(plan, 1))
    rows = page.context["steps"]
    assert [(row.step.seqNo, row.status_label) for row in rows] == [(0, "completed"), (1, "not started")]
    step_page = reverse("chat:conversation", args=[step_conversation.pk])
    assert [row.conversation_url for row in rows] == [step_page, step_page]  # both steps are that agent's
    body = page.content.decode()
    assert f'<a class="plan-step-conversation" href="{step_page}">' in body
    assert reverse("chat:conversation", args=[elsewhere.pk]) not in body
    assert f'href="{reverse("chat:conversation", args=[plan.conversation_id])}"' in body  # the user's own
    assert 'data-step="1" data-status="not_started" aria-current="true"' in body  # ?step=1 is marked
    # The admin opens the step conversation from there (members never do: tests/chat/test_access.py).
    assert login(tenant_admin, tenant).get(step_page).status_code == 200


def test_members_are_refused_the_log(login, tenant, member):
    plan = _logged_plan(tenant, "Solar", user=member)
    response = login(member, tenant).get(_log_url(plan))
    assert response.status_code == 403 and "Solar_tool" not in response.content.decode()
    assert "plan-step-conversation" not in response.content.decode()


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


def test_access_plan_gives_members_their_own_plans_and_administrators_every_one(
    tenant, member, tenant_admin, other_tenant
):
    mine = make_plan(tenant, "Solar", user=member)
    someone_elses = make_plan(tenant, "Wind")
    theirs = make_plan(other_tenant, "Noodle")
    with tenant_scope(tenant):
        member_of = Membership.objects.get(tenant=tenant, user=member)
        admin_of = Membership.objects.get(tenant=tenant, user=tenant_admin)
        read = partial(access_plan, tenant=tenant)
        assert read(user=member, membership=member_of, plan_id=mine.planId) == mine
        assert read(user=tenant_admin, membership=admin_of, plan_id=someone_elses.planId) == someone_elses
        for user, membership, plan in [(member, member_of, someone_elses), (tenant_admin, admin_of, theirs)]:
            with pytest.raises(Plan.DoesNotExist):
                read(user=user, membership=membership, plan_id=plan.planId)
        # An API key limited to some agents reads the plans of those agents' conversations only.
        wind_planner = someone_elses.conversation.agent_id
        assert read(user=tenant_admin, membership=admin_of, plan_id=someone_elses.planId, agent_ids=[wind_planner])
        with pytest.raises(Plan.DoesNotExist):
            read(user=tenant_admin, membership=admin_of, plan_id=mine.planId, agent_ids=[wind_planner])
        assert list(plans_readable(user=member, membership=member_of, tenant=tenant)) == [mine]


def test_the_log_says_tool_calls_and_steps_in_the_chats_words_with_fields(login, tenant, tenant_admin):
    """Issue 36: a tool call is the chat's line (by its label and outcome), a workflow agent's step by its step type
    or tool, its arguments `name: value` fields (data as code), the result after; in Chinese too."""
    plan = _logged_plan(tenant, "Solar")
    with tenant_scope(tenant):
        services.plan_log(plan=plan, kind=LogKind.TOOL_CALL, step=1, data={
            "name": "pv_economics", "status": "failed", "arguments": {"location": "杭州", "capacity_kw": 50},
        })  # fmt: skip
        services.plan_log(plan=plan, kind=LogKind.TOOL_CALL, step=1, data={
            "name": "ask_project", "status": "interrupted", "step_type": "ask", "arguments": {}, "tool": None,
        })  # fmt: skip
        services.plan_log(
            plan=plan, kind=LogKind.MODEL_CALL, step=1, data={"role": "step", "tool_calls": ["pv_economics"]}
        )
    client = login(tenant_admin, tenant)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "zh-hans"
    page = client.get(_log_url(plan, 1))
    summaries = [str(entry.summary) for entry in page.context["entries"]]
    assert (
        '<span class="plan-tool-line" title="pv_economics">工具「光伏经济性测算」失败</span> <span class="plan-fields">'
        '<span class="plan-field"><code>location</code>: 杭州</span>'
        '<span class="plan-field"><code>capacity_kw</code>: <code>50</code></span></span>'
    ) in summaries
    assert '<span class="plan-tool-line" title="ask_project">步骤「询问用户」在等待你的回答</span>' in summaries
    assert "步骤智能体 · → 光伏经济性测算" in summaries
    with tenant_scope(tenant):  # a planner's own tools have no label: their names are code; JSON text is code
        services.plan_log(
            plan=plan, kind=LogKind.MODEL_CALL, step=2, data={"role": "planner", "tool_calls": ["list_agents"]}
        )
        services.plan_log(plan=plan, kind=LogKind.TOOL_CALL, step=2, data={
            "name": "ask", "status": "completed", "step_type": "input",
            "arguments": {"message": '{"userQuery": "杭州"}'},
        })  # fmt: skip
    summaries = [str(entry.summary) for entry in client.get(_log_url(plan, 2)).context["entries"]]
    assert summaries[0] == "规划师 · → <code>list_agents</code>"
    assert summaries[1].endswith(
        "<code>message</code>: <code>{&quot;userQuery&quot;: &quot;杭州&quot;}</code></span></span>"
    )
    body = page.content.decode()
    assert "pv_economics(" not in body and "已中断" not in body

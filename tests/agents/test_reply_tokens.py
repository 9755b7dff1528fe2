"""An agent's longest reply (`max_reply_tokens`): every model call of a turn carries it as max_tokens, a version
freezes it, the form and the admin edit it with messages in English and Chinese, export and import keep it, and
another tenant's agent cannot be given one."""

import asyncio

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import translation

from agents.config import agent_config
from agents.export import AgentImportError, agent_export, agent_import
from agents.models import MAX_REPLY_TOKENS, Agent, AgentVersion
from agents.services import agent_create, agent_publish, agent_update, conversation_start
from agents.tools import ToolResult, python_tool
from agents.workflows.services import workflow_save
from core.db import database_sync_to_async
from llm import tokens
from llm.options import ChatRequest
from tenants.scope import all_tenants, tenant_scope
from tests.agents.factories import THINKER_WORKFLOW
from tests.agents.test_views import _form as views_form
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

pytestmark = pytest.mark.django_db

EN = {"HTTP_ACCEPT_LANGUAGE": "en"}
ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}
TOO_FEW = {
    "en": "Enter a whole number of tokens above 0, or leave the field empty for no limit.",
    "zh-hans": "请输入大于 0 的整数 Token 数，或留空表示不限制。",
}
TOO_MANY = {
    "en": f"The longest reply may be at most {MAX_REPLY_TOKENS} tokens.",
    "zh-hans": f"单次回复最多只能设为 {MAX_REPLY_TOKENS} 个 Token。",
}


@python_tool(
    name="rt_clock",
    description_en="The time of day.",
    parameters={"type": "object", "properties": {}},
)
def rt_clock() -> ToolResult:
    return ToolResult(content="It is noon.")


# --- the configuration ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cap", "asked", "sent"),
    [(None, None, None), (None, 50, 50), (8, None, 8), (8, 50, 8), (8, 3, 3), (8, 8, 8)],
)
def test_a_calls_max_tokens_is_the_clients_within_the_agents_cap(tenant, cap, asked, sent):
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Capped", max_reply_tokens=cap)
        config = agent_config(agent=agent)
    # The one rule (llm.options.ChatRequest.within), as agents.modelcall applies the agent's cap to every call.
    assert ChatRequest(messages=(), max_tokens=asked).within(config.max_reply_tokens).max_tokens == sent


def test_a_version_freezes_the_cap_and_an_old_version_has_none(tenant):
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Capped", max_reply_tokens=40)
        version = agent_publish(agent=agent, user=None)
        agent_update(agent=agent, max_reply_tokens=400)
        assert version.snapshot["max_reply_tokens"] == 40
        assert agent_config(agent=agent, version=version).max_reply_tokens == 40
        assert agent_config(agent=agent).max_reply_tokens == 400  # the draft
        # A version published before the setting existed: no key, no cap.
        old = dict(version.snapshot)
        del old["max_reply_tokens"]
        AgentVersion.objects.filter(pk=version.pk).update(snapshot=old)
        version.refresh_from_db()
        assert agent_config(agent=agent, version=version).max_reply_tokens is None
        # No cap is left out of the snapshot, so an agent published before it existed is unchanged.
        agent_update(agent=agent, max_reply_tokens=None)
        assert "max_reply_tokens" not in agent.snapshot()


# --- a chat turn ------------------------------------------------------------------------------------------------


@pytest.fixture
def capped_conversation(tenant, member, scripted_llm):
    def make(cap, **fields):
        with tenant_scope(tenant):
            ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True)
            agent = agent_create(
                tenant=tenant, name="Talker", system_prompt="Talk.", model="gpt-4", max_reply_tokens=cap, **fields
            )
            agent_publish(agent=agent, user=None)
            return conversation_start(agent=agent, user=member)

    return make


async def _sent(scripted_llm) -> list[dict]:
    return [request["body"] for request in await asyncio.to_thread(scripted_llm.requests)]


@pytest.mark.django_db(transaction=True)
async def test_each_model_call_of_a_chat_turn_carries_the_cap_and_a_cut_reply_says_length(
    tenant, capped_conversation, scripted_llm
):
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False}, "reply": {"tool_calls": [{"name": "rt_clock", "arguments": {}}]}},
        {"when": {"has_tool_results": True}, "reply": {"text_tokens": 60}},
    )
    conversation = await database_sync_to_async(capped_conversation)(7, tools=["rt_clock"])
    _user, reply, sink = await user_turn(tenant, conversation, "What time is it?")

    sent = await _sent(scripted_llm)
    assert [body["max_tokens"] for body in sent] == [7, 7]  # the tool call and the answer
    assert sink.result.finish_reason == "length"
    assert tokens.count_text(reply.content, "gpt-4") == 7


@pytest.mark.django_db(transaction=True)
async def test_without_a_cap_a_chat_turn_sends_no_max_tokens(tenant, capped_conversation, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 60}})
    conversation = await database_sync_to_async(capped_conversation)(None)
    _user, reply, sink = await user_turn(tenant, conversation, "Talk.")

    (body,) = await _sent(scripted_llm)
    assert "max_tokens" not in body and "max_completion_tokens" not in body
    assert sink.result.finish_reason == "stop" and tokens.count_text(reply.content, "gpt-4") == 60


WORKFLOW = THINKER_WORKFLOW


@pytest.mark.django_db(transaction=True)
async def test_a_workflow_agents_llm_step_is_cut_at_the_cap(tenant, member, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 60}})

    def make():
        with tenant_scope(tenant):
            ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True)
            agent = agent_create(tenant=tenant, name="Thinker", kind="workflow", max_reply_tokens=9)
            workflow_save(tenant=tenant, yaml_text=WORKFLOW, agent=agent)
            return conversation_start(agent=agent, user=member)

    conversation = await database_sync_to_async(make)()
    _user, reply, _sink = await user_turn(tenant, conversation, "rain")

    (body,) = await _sent(scripted_llm)
    assert body["max_tokens"] == 9 and body["messages"][-1]["content"] == "Think about rain."
    assert tokens.count_text(reply.content, "gpt-4") == 9


# --- the agent form and the admin -------------------------------------------------------------------------------


@pytest.fixture
def provider(tenant):
    with tenant_scope(tenant):
        return ModelProviderFactory(tenant=tenant, name="Tenant OpenAI", is_default=True)


def _form(**overrides):
    """The agent form as tests/agents/test_views.py fills it, without a context strategy."""
    fields = {"overflow_strategy": "none", "overflow_max_tokens": "", "max_reply_tokens": "", **overrides}
    return views_form(**fields)


def test_the_form_sets_changes_and_clears_the_cap(login, tenant_admin, tenant, provider):
    client = login(tenant_admin, tenant)
    page = client.get(reverse("agents:create"), **EN).content.decode()
    assert 'name="max_reply_tokens"' in page and "Longest reply (tokens)" in page
    assert "单次回复最多 Token 数" in client.get(reverse("agents:create"), **ZH).content.decode()

    assert client.post(reverse("agents:create"), _form(max_reply_tokens="512"), **EN).status_code == 302
    with tenant_scope(tenant):
        agent = Agent.objects.get(name="Grid helper")
    assert agent.max_reply_tokens == 512
    edit = reverse("agents:edit", args=[agent.pk])
    assert 'name="max_reply_tokens" value="512"' in client.get(edit, **EN).content.decode()
    detail = client.get(reverse("agents:detail", args=[agent.pk]), **EN).content.decode()
    assert '<dd id="agent-max-reply-tokens">512</dd>' in detail

    assert client.post(edit, _form(max_reply_tokens=str(MAX_REPLY_TOKENS)), **EN).status_code == 302
    with tenant_scope(tenant):  # row-level security on PostgreSQL: the row is read in its tenant's scope
        agent.refresh_from_db()
    assert agent.max_reply_tokens == MAX_REPLY_TOKENS
    assert client.post(edit, _form(), **EN).status_code == 302  # empty: no cap
    with tenant_scope(tenant):
        agent.refresh_from_db()
    assert agent.max_reply_tokens is None
    detail = client.get(reverse("agents:detail", args=[agent.pk]), **ZH).content.decode()
    assert "不限制（使用模型自身的上限）" in detail


@pytest.mark.parametrize("language", ["en", "zh-hans"])
@pytest.mark.parametrize(
    ("value", "messages"), [("0", TOO_FEW), ("-5", TOO_FEW), (str(MAX_REPLY_TOKENS + 1), TOO_MANY)]
)
def test_the_form_refuses_a_cap_below_one_or_over_the_maximum(
    login, tenant_admin, tenant, provider, value, messages, language
):
    client = login(tenant_admin, tenant)
    response = client.post(reverse("agents:create"), _form(max_reply_tokens=value), HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert list(errors) == ["max_reply_tokens"] and errors["max_reply_tokens"] == [messages[language]]
    assert 'id="errors-max_reply_tokens"' in response.content.decode()
    with tenant_scope(tenant):
        assert not Agent.objects.filter(name="Grid helper").exists()


def test_the_model_refuses_what_the_form_refuses(tenant):
    """Every other way in (the services, import, the REST API) checks the same rule with the same message."""
    with tenant_scope(tenant), translation.override("en"):
        for value, message in ((0, TOO_FEW["en"]), (MAX_REPLY_TOKENS + 1, TOO_MANY["en"])):
            with pytest.raises(ValidationError) as refused:
                agent_create(tenant=tenant, name=f"Bad {value}", max_reply_tokens=value)
            assert refused.value.message_dict == {"max_reply_tokens": [message]}


def _admin_form(**overrides):
    data = {key: value for key, value in _form(**overrides).items() if key != "overflow_preset"}
    return {**data, "name": "Menu planner", "versions-TOTAL_FORMS": "0", "versions-INITIAL_FORMS": "0"}


def test_the_admin_edits_the_cap_in_the_model_fieldset(login, tenant_admin, tenant):
    client = login(tenant_admin, tenant)
    page = client.get(reverse("admin:agents_agent_add"), **EN).content.decode()
    assert 'name="max_reply_tokens"' in page
    refused = client.post(reverse("admin:agents_agent_add"), _admin_form(max_reply_tokens="0"), **ZH)
    assert refused.context["adminform"].form.errors["max_reply_tokens"] == [TOO_FEW["zh-hans"]]
    assert client.post(reverse("admin:agents_agent_add"), _admin_form(max_reply_tokens="300"), **EN).status_code == 302
    with tenant_scope(tenant):
        assert Agent.objects.get(name="Menu planner").max_reply_tokens == 300


def test_another_tenants_agent_cannot_be_seen_or_given_a_cap(login, tenant_admin, tenant, other_tenant, agents):
    theirs = agents["theirs"]
    with tenant_scope(other_tenant):
        agent_update(agent=theirs, max_reply_tokens=4321)
    client = login(tenant_admin, tenant)
    assert client.get(reverse("agents:detail", args=[theirs.pk]), **EN).status_code == 404
    assert client.get(reverse("agents:edit", args=[theirs.pk]), **EN).status_code == 404
    edit = client.post(reverse("agents:edit", args=[theirs.pk]), _form(name="Noodle chef", max_reply_tokens="5"))
    assert edit.status_code == 404
    change = reverse("admin:agents_agent_change", args=[theirs.pk])
    page = client.get(change, follow=True)
    assert page.redirect_chain and "4321" not in page.content.decode() and "Noodle chef" not in page.content.decode()
    client.post(change, _admin_form(name="Noodle chef", max_reply_tokens="5"))
    with all_tenants(reason="test: the other tenant's agent is untouched"):
        theirs.refresh_from_db()
    assert (theirs.name, theirs.max_reply_tokens) == ("Noodle chef", 4321)


# --- export and import ------------------------------------------------------------------------------------------


def test_export_and_import_keep_the_cap_and_an_old_export_imports_without_one(tenant, other_tenant):
    with tenant_scope(tenant):
        original = agent_create(tenant=tenant, name="Brief", max_reply_tokens=256)
        text = agent_export(agent=original)
    assert yaml.safe_load(text)["agent"]["max_reply_tokens"] == 256
    with tenant_scope(other_tenant), translation.override("en"):
        imported = agent_import(tenant=other_tenant, text=text)
        assert imported.max_reply_tokens == 256 and imported.tenant_id == other_tenant.pk
        assert agent_export(agent=imported) == text

        old = yaml.safe_load(text)
        del old["agent"]["max_reply_tokens"]
        old["agent"]["name"] = "Before the setting"
        assert agent_import(tenant=other_tenant, text=yaml.safe_dump(old)).max_reply_tokens is None

        old["agent"].update(name="Too long", max_reply_tokens=MAX_REPLY_TOKENS + 1)
        with pytest.raises(AgentImportError) as refused:
            agent_import(tenant=other_tenant, text=yaml.safe_dump(old))
        assert refused.value.errors == [TOO_MANY["en"]]
        assert not Agent.objects.filter(name="Too long").exists()

"""The agent-settings table (agents.settings_table): the lists, the snapshot, the export and the config a turn runs
with are derived from it; the model, the form, the admin and the REST serializers are explicit and cover it; and a
made-up setting is one row."""

from __future__ import annotations

import types
from dataclasses import dataclass, fields
from typing import get_args, get_origin

import pytest
from django.contrib.admin import site
from django.test import Client

from agents.config import KNOWLEDGE_TOOL, AgentConfig, agent_config, config_from_snapshot
from agents.export import FIELDS, agent_export
from agents.forms import FIELD_STRATEGIES, OVERFLOW_FIELDS, SERVICE_FIELDS, AgentConfigForm, AgentForm
from agents.models import SNAPSHOT_FIELDS, Agent
from agents.services import EDITABLE_FIELDS, agent_create, agent_publish, agent_update
from agents.settings_table import SETTINGS, AgentSetting, SettingsTable, read_text
from api.keys import key_create
from api.models import KeyScope
from api.rest import AGENT_SETTINGS_NOT_WRITTEN, AgentSerializer, AgentWriteSerializer
from memory.overflow import OverflowConfig
from tenants.scope import all_tenants, tenant_scope
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.llm.factories import ModelProviderFactory

pytestmark = pytest.mark.django_db

WINDOW = {"strategy": "sliding_window", "max_tokens": 8000, "reserve_ratio": 0.1}


# --- the derived lists ------------------------------------------------------------------------------------------


def test_the_lists_are_derived_from_the_table_with_its_exceptions():
    """What the hand-kept lists said: every setting editable; all but the switch frozen by a version (the relations
    as ids); all but the tenant's own things and the switch exported."""
    assert tuple(setting.name for setting in SETTINGS) == EDITABLE_FIELDS
    assert [setting.name for setting in SETTINGS if not setting.snapshotted] == ["active"]
    assert [setting.name for setting in SETTINGS if not setting.exported] == ["provider", "knowledge_bases", "active"]
    assert {"provider_id", "knowledge_base_ids"} <= set(SNAPSHOT_FIELDS)
    assert not {"provider", "knowledge_bases", "active"} & set(SNAPSHOT_FIELDS)
    # The export writes the snapshot's settings in its order, less the relations.
    assert tuple(name for name in SNAPSHOT_FIELDS if name not in ("provider_id", "knowledge_base_ids")) == FIELDS
    assert set(SERVICE_FIELDS) == set(EDITABLE_FIELDS) - {"name", "token_overflow_config"}


def test_a_setting_declared_twice_is_refused():
    with pytest.raises(ValueError, match="declared twice"):
        SETTINGS.extended(SETTINGS["model"])


# --- the model ----------------------------------------------------------------------------------------------------

# What each kind of model field holds, as the table's `type` says it.
FIELD_TYPES = {
    "CharField": str,
    "TextField": str,
    "FloatField": float,
    "PositiveIntegerField": int,
    "BooleanField": bool,
}


def _declared(setting: AgentSetting) -> tuple[object, bool]:
    """The table's type of `setting` without None, and whether None is allowed."""
    if isinstance(setting.type, types.UnionType):
        args = set(get_args(setting.type))
        (base,) = args - {types.NoneType}
        return base, types.NoneType in args
    return setting.type, False


@pytest.mark.parametrize("setting", list(SETTINGS), ids=lambda setting: setting.name)
def test_each_setting_is_a_field_of_agent_of_the_tables_type_and_default(setting):
    field = Agent._meta.get_field(setting.name)
    base, nullable = _declared(setting)
    if field.many_to_many:
        assert base == list[field.related_model] and setting.default == []
        return
    if field.is_relation:
        assert base is field.related_model
    elif field.get_internal_type() == "JSONField":
        assert get_origin(base) is type(field.get_default())
    else:
        assert base is FIELD_TYPES[field.get_internal_type()]
    assert nullable == field.null
    assert field.get_default() == setting.default


# --- the config a turn runs with ------------------------------------------------------------------------------

# The AgentConfig attributes the resolver composes itself rather than taking one setting's value as it is.
COMPOSED = {"agent_id", "name", "provider", "model", "model_is_own", "tool_names", "workflow_yaml", "version_id"}


def test_agent_config_holds_the_tables_settings_and_what_the_resolver_composes():
    from_table = [setting.config for setting in SETTINGS if setting.config]
    assert len(from_table) == len(set(from_table)) and not set(from_table) & COMPOSED
    assert {field.name for field in fields(AgentConfig)} == set(from_table) | COMPOSED


def test_a_version_reads_back_as_the_configuration_it_froze(in_tenant):
    provider = ModelProviderFactory(tenant=in_tenant, name="own", default_chat_model="gpt-4")
    knowledge_base = KnowledgeBaseFactory(tenant=in_tenant)
    agent = agent_create(
        tenant=in_tenant,
        name="Full",
        description="Everything set",
        system_prompt="Be brief.",
        provider=provider,
        model="gpt-4o",
        temperature=0.2,
        kind="react",
        tools=["ask_user"],
        token_overflow_config=WINDOW,
        long_term_memory=True,
        memory_extraction="rules",
        max_reply_tokens=500,
        knowledge_bases=[knowledge_base],
    )
    version = agent_publish(agent=agent, user=None)
    agent_update(agent=agent, name="Renamed", system_prompt="Changed.", max_reply_tokens=None, knowledge_bases=[])

    assert agent_config(agent=agent, version=version) == AgentConfig(
        agent_id=agent.pk,
        name="Full",
        kind="react",
        system_prompt="Be brief.",
        provider=provider,
        model="gpt-4o",
        temperature=0.2,
        tool_names=("ask_user", KNOWLEDGE_TOOL),
        knowledge_base_ids=(knowledge_base.pk,),
        overflow=OverflowConfig.from_dict(WINDOW),
        workflow_yaml=None,
        version_id=version.pk,
        model_is_own=True,
        long_term_memory=True,
        memory_extraction="rules",
        max_reply_tokens=500,
    )
    draft = agent_config(agent=agent)
    assert (draft.name, draft.system_prompt, draft.max_reply_tokens, draft.tool_names) == (
        "Renamed",
        "Changed.",
        None,
        ("ask_user",),
    )


def test_a_snapshot_without_a_setting_reads_as_before(in_tenant):
    """Each setting's reading where a (hand-made or old) snapshot has none: the agent's name, no temperature (the
    provider's own), the defaults of the rest."""
    provider = ModelProviderFactory(tenant=in_tenant, is_default=True, default_chat_model="gpt-4")
    agent = agent_create(tenant=in_tenant, name="Bare")
    config = config_from_snapshot({}, agent=agent, version_id=None)
    assert config == AgentConfig(
        agent_id=agent.pk,
        name="Bare",
        kind="chat",
        system_prompt="",
        provider=provider,
        model="gpt-4",
        temperature=None,
        tool_names=(),
        knowledge_base_ids=(),
        overflow=OverflowConfig(),
        workflow_yaml=None,
        version_id=None,
    )


# --- a made-up setting: one row ---------------------------------------------------------------------------------

GREETING = AgentSetting("greeting", str, "", config="greeting", read=read_text, omit_default=True)


@dataclass(frozen=True)
class GreetingConfig(AgentConfig):
    """The AgentConfig attribute a turn would read the made-up setting as."""

    greeting: str = ""


def _as_greeting_config(config: AgentConfig, greeting: str) -> GreetingConfig:
    return GreetingConfig(
        **{field.name: getattr(config, field.name) for field in fields(AgentConfig)}, greeting=greeting
    )


def test_a_made_up_setting_is_one_row_that_the_lists_the_snapshot_the_export_and_the_resolver_pick_up(in_tenant):
    table = SETTINGS.extended(GREETING)
    assert isinstance(table, SettingsTable) and "greeting" not in SNAPSHOT_FIELDS  # a copy: the app's is unchanged
    assert table.snapshot_keys == (*SNAPSHOT_FIELDS, "greeting")
    assert table.editable_fields == (*EDITABLE_FIELDS, "greeting")
    assert table.export_fields == (*FIELDS, "greeting")

    agent = agent_create(tenant=in_tenant, name="Greeter", system_prompt="Greet.")
    agent.greeting = "Hello!"  # what its model field would hold
    snapshot = table.freeze(agent)
    assert snapshot == {**agent.snapshot(), "greeting": "Hello!"}
    assert table.export(agent) == {**SETTINGS.export(agent), "greeting": "Hello!"}
    config = config_from_snapshot(snapshot, agent=agent, version_id=None, table=table, config_type=GreetingConfig)
    assert config == _as_greeting_config(agent_config(agent=agent), "Hello!")

    # A version published before the setting existed reads as its default, and equals its unchanged draft.
    old = agent.snapshot()
    old_config = config_from_snapshot(old, agent=agent, version_id=None, table=table, config_type=GreetingConfig)
    assert old_config.greeting == ""
    agent.greeting = ""
    assert table.freeze(agent) == old


# --- the form, the admin and the REST API cover the table -----------------------------------------------------

# The token-management fields edit one setting between them, token_overflow_config (agents.forms.OVERFLOW_FIELDS,
# and the preset that fills the maximum); the admin's tenant is no setting.
OVERFLOW_FORM_FIELDS = {*OVERFLOW_FIELDS.values(), *FIELD_STRATEGIES}


def _settings_edited_by(names: set[str]) -> set[str]:
    names = set(names) - {"tenant"}
    assert names >= OVERFLOW_FORM_FIELDS, "the token management's fields come together"
    return (names - OVERFLOW_FORM_FIELDS) | {"token_overflow_config"}


@pytest.mark.parametrize("form", [AgentForm, AgentConfigForm])
def test_the_forms_edit_every_editable_setting_and_nothing_else(form):
    assert _settings_edited_by(set(form.base_fields)) == set(EDITABLE_FIELDS)


def test_the_admin_shows_every_editable_setting_and_nothing_else():
    admin = site._registry[Agent]
    assert admin.form is AgentForm
    shown = [name for _title, options in admin.fieldsets for name in options["fields"]]
    assert len(shown) == len(set(shown))
    readonly = set(admin.readonly_fields)
    assert not readonly & {setting.name for setting in SETTINGS}, "a setting the admin shows is one it edits"
    assert _settings_edited_by(set(shown) - readonly) == set(EDITABLE_FIELDS)


def test_the_rest_serializers_cover_the_table():
    assert set(EDITABLE_FIELDS) >= AGENT_SETTINGS_NOT_WRITTEN
    assert set(AgentWriteSerializer().fields) == set(EDITABLE_FIELDS) - AGENT_SETTINGS_NOT_WRITTEN
    # The read serializer: some settings, and what is the agent's own rather than a setting.
    read = set(AgentSerializer().fields) - {"id", "slug", "published_version", "created_at", "updated_at"}
    assert read <= {setting.name for setting in SETTINGS}


def test_the_rest_api_writes_and_reads_the_memory_settings_in_its_own_tenant_only(tenant, other_tenant, tenant_admin):
    with tenant_scope(tenant):
        mine = agent_create(tenant=tenant, name="Mine")
        _key, secret = key_create(tenant=tenant, user=tenant_admin, name="writer", scopes=list(KeyScope.values))
    with tenant_scope(other_tenant):
        theirs = agent_create(tenant=other_tenant, name="Theirs")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_ACCEPT_LANGUAGE="en")
    body = {"long_term_memory": True, "memory_extraction": "rules"}

    changed = client.patch(f"/api/v1/agents/{mine.pk}/", body, "application/json")
    assert changed.status_code == 200
    assert (changed.json()["long_term_memory"], changed.json()["memory_extraction"]) == (True, "rules")
    refused = client.patch(f"/api/v1/agents/{mine.pk}/", {"memory_extraction": "psychic"}, "application/json")
    assert refused.status_code == 400 and "memory_extraction" in refused.json()["error"]["fields"]
    created = client.post("/api/v1/agents/", {"name": "New", **body}, "application/json")
    assert created.status_code == 201 and created.json()["memory_extraction"] == "rules"

    assert client.patch(f"/api/v1/agents/{theirs.pk}/", body, "application/json").status_code == 404
    with all_tenants(reason="test: the other tenant's agent is untouched"):
        theirs.refresh_from_db()
    assert (theirs.long_term_memory, theirs.memory_extraction) == (False, "model")


def test_the_export_writes_the_tables_exported_settings(in_tenant):
    agent = agent_create(tenant=in_tenant, name="Exported", long_term_memory=True, token_overflow_config=WINDOW)
    text = agent_export(agent=agent)
    assert "long_term_memory: true" in text and "provider" not in text and "knowledge_base" not in text
    assert list(SETTINGS.export(agent)) == list(FIELDS)

"""An agent's configuration as a turn uses it: frozen, typed, built once from a version by one resolver.

A published AgentVersion freezes its agent's configuration as a JSON snapshot (A2); `agent_config` reads that
snapshot (or the draft's, for an agent never published) in one place, through the agent-settings table
(agents.settings_table), the way memory.overflow reads its OverflowConfig. Runners and services take an AgentConfig
and never look into the snapshot dict themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.utils.translation import get_language

from agents.models import Agent, AgentVersion
from agents.settings_table import SETTINGS, SettingsTable
from agents.tools import get_tool, tool_refusal
from agents.workflows.schema import WorkflowValidationError, parse_workflow
from llm.models import ModelProvider
from llm.selectors import default_provider
from memory.models import ConversationSource
from memory.overflow import OverflowConfig
from tenants.generation import TenantMemo

if TYPE_CHECKING:
    from memory.models import Conversation
    from tenants.models import Tenant

KNOWLEDGE_TOOL = "plugin_ai_knowledge_base_query"


@dataclass(frozen=True)
class AgentConfig:
    """What a turn of one agent runs with."""

    agent_id: int
    name: str
    kind: str
    system_prompt: str
    provider: ModelProvider | None
    model: str
    temperature: float | None
    # The tools the model is offered (an agent with knowledge bases always gets the knowledge-base tool).
    tool_names: tuple[str, ...]
    knowledge_base_ids: tuple[int, ...]
    overflow: OverflowConfig
    # A workflow agent's document as the version froze it (None: the workflow as it is now).
    workflow_yaml: str | None
    version_id: int | None
    # The version names its model (else `model` is the provider's default; plan steps then use the execution tier).
    model_is_own: bool = False
    # Long-term memory (memory.longterm): recalled before each turn, extracted after it by this mode.
    long_term_memory: bool = False
    memory_extraction: str = "model"
    # The agent's longest reply in tokens (None: no cap): every model call of a turn asks for at most this.
    max_reply_tokens: int | None = None

    def pack_refusals(self, tenant: Tenant) -> list[str]:
        """Why this configuration may not run in `tenant` (empty: it may); see `pack_refusals`."""
        return pack_refusals(tool_names=self.tool_names, workflow_yaml=self.workflow_yaml, tenant=tenant)

    @property
    def language(self) -> str:
        """The language of tool descriptions: Chinese when the agent's prompt is, else the active one."""
        if any("\u4e00" <= char <= "\u9fff" for char in self.system_prompt):
            return "zh-hans"
        return get_language() or "en"


def pack_refusals(*, tool_names: Iterable[str], workflow_yaml: str | None, tenant: Tenant) -> list[str]:
    """Each tool the configuration names (its own, or its workflow's plugin and custom steps) that belongs to a pack
    `tenant` has not enabled, as a sentence saying so (tenants.packs). A version published before the platform
    operator disabled the pack, or a crafted configuration, is refused with these instead of running."""

    names = list(dict.fromkeys(str(name) for name in tool_names))
    if workflow_yaml:
        try:
            steps = parse_workflow(workflow_yaml, check_names=False).steps
        except WorkflowValidationError:
            steps = []  # the workflow runner reports what is wrong with the document
        names += [name for step in steps if (name := step.plugin or step.function) and name not in names]
    # An unknown name is left to the runners (a tool loop leaves it out, a workflow step fails on it).
    return [refusal for name in names if get_tool(name) is not None and (refusal := tool_refusal(name, tenant=tenant))]


def _provider(*, tenant: Any, provider_id: int | None) -> ModelProvider | None:
    provider = ModelProvider.objects.filter(pk=provider_id).first() if provider_id else None
    return provider or default_provider(tenant=tenant)


def agent_config(
    *,
    agent: Agent,
    version: AgentVersion | None = None,
    provider: ModelProvider | None = None,
    model: str = "",
) -> AgentConfig:
    """The configuration `version` froze (None: the agent's draft). `provider` and `model`, when given, are the
    ones a conversation fixed at its start; otherwise the version's, else the tenant's default provider."""
    snapshot: dict[str, Any] = version.snapshot if version is not None else agent.snapshot()
    return config_from_snapshot(
        snapshot, agent=agent, version_id=version.pk if version is not None else None, provider=provider, model=model
    )


def config_from_snapshot(
    snapshot: dict[str, Any],
    *,
    agent: Agent,
    version_id: int | None,
    provider: ModelProvider | None = None,
    model: str = "",
    table: SettingsTable = SETTINGS,
    config_type: type[AgentConfig] = AgentConfig,
) -> AgentConfig:
    """The AgentConfig of a snapshot: each setting read as the table says, the attributes the table names filled
    with them, and the rest composed here (the provider and model, the knowledge-base tool, the agent's name).
    `table` and `config_type`: another table and the config class that holds its settings (a test's made-up one)."""
    values = table.read(snapshot)
    if provider is None:
        provider = _provider(tenant=agent.tenant, provider_id=values["provider"])
    own_model = values["model"]
    tool_names = values["tools"]
    if values["knowledge_bases"] and KNOWLEDGE_TOOL not in tool_names:
        tool_names = (*tool_names, KNOWLEDGE_TOOL)
    return config_type(
        **table.config_fields(values),
        agent_id=agent.pk,
        name=values["name"] or agent.name,
        provider=provider,
        model=model or own_model or (provider.default_chat_model if provider is not None else ""),
        model_is_own=bool(own_model),
        tool_names=tool_names,
        workflow_yaml=snapshot.get("workflow_yaml"),
        version_id=version_id,
    )


@dataclass(frozen=True)
class Published:
    """An agent's newest published version (None while it is a draft only) and the configuration new conversations
    start with."""

    version: AgentVersion | None
    config: AgentConfig


_published: TenantMemo[Published | None] = TenantMemo()


def _read_published(agent: Agent) -> Published | None:
    version = agent.published_version()
    return Published(version, agent_config(agent=agent, version=version)) if version is not None else None


def published_config(agent: Agent) -> Published:
    """What a new conversation of `agent` starts on: its published version's configuration, kept per process under
    the tenant's generation (a publish, an edit of its provider, are seen at the next message); a draft-only agent's
    configuration is read afresh each time (it follows every edit of the draft)."""
    found = _published.get(agent.tenant_id, agent.pk, lambda: _read_published(agent))
    return found if found is not None else Published(None, agent_config(agent=agent, version=None))


def conversation_config(conversation: Conversation) -> AgentConfig:
    """The configuration of `conversation`'s turns: the version it started with, its provider and model. A test
    conversation has no version: it runs the agent's draft as it is now."""
    agent = conversation.agent
    if conversation.is_test:
        # Read afresh: the conversation's agent may be the instance read when its socket opened, before an edit.
        agent = Agent.objects.get(pk=conversation.agent_id)
    config = agent_config(
        agent=agent,
        version=conversation.version,
        provider=conversation.provider,
        model=conversation.model,
    )
    if conversation.source == ConversationSource.EVAL and config.long_term_memory:
        # An evaluation run's conversation neither recalls nor keeps long-term memory: its cases must not read a
        # person's memories, nor leave their own for the next case (evals).
        config = replace(config, long_term_memory=False)
    return config

"""Writes of agents: create, edit the draft, publish a version."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils.translation import gettext as _

from agents import publishgate
from agents.config import agent_config, published_config
from agents.models import Agent, AgentVersion
from agents.settings_table import SETTINGS
from memory.models import Conversation, ConversationSource, Visitor
from memory.services import conversation_create
from tenants.models import Tenant

# What agent_create and agent_update take: the editable agent settings (agents.settings_table).
EDITABLE_FIELDS = SETTINGS.editable_fields


def _set_knowledge_bases(agent: Agent, knowledge_bases: Any) -> None:
    """Attach exactly these knowledge bases; one of another tenant is refused."""

    knowledge_bases = list(knowledge_bases or [])
    if any(kb.tenant_id != agent.tenant_id for kb in knowledge_bases):
        raise ValidationError({"knowledge_bases": _("A knowledge base of another tenant cannot be attached.")})
    agent.knowledge_bases.set(knowledge_bases)


def agent_create(*, tenant: Tenant, name: str, **fields: Any) -> Agent:
    """Create an agent (a draft); `fields` are any of EDITABLE_FIELDS. Raises ValidationError on bad input."""
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        raise TypeError(f"agent_create() got unknown fields: {sorted(unknown)}")
    knowledge_bases = fields.pop("knowledge_bases", None)
    agent = Agent(tenant=tenant, name=name, **fields)
    agent.full_clean()
    with transaction.atomic():
        agent.save()
        if knowledge_bases is not None:
            _set_knowledge_bases(agent, knowledge_bases)
    return agent


def agent_update(*, agent: Agent, **fields: Any) -> Agent:
    """Edit the draft; published versions and the conversations using them are unchanged."""
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        raise TypeError(f"agent_update() got unknown fields: {sorted(unknown)}")
    knowledge_bases = fields.pop("knowledge_bases", None)
    for name, value in fields.items():
        setattr(agent, name, value)
    agent.full_clean()
    with transaction.atomic():
        agent.save()
        if knowledge_bases is not None:
            _set_knowledge_bases(agent, knowledge_bases)
    return agent


@transaction.atomic
def agent_publish(*, agent: Agent, user: AbstractBaseUser | None, gate: bool = True) -> AgentVersion:
    """Freeze the draft as the next version (1, 2, ...); new conversations use it. With `gate` the agent's publish
    gate decides first (agents.publishgate: PublishRefused when it refuses) and its decision is kept on the version."""
    # Lock the agent row so that two publishes cannot take the same number.
    Agent.objects.select_for_update().filter(pk=agent.pk).first()
    agent.full_clean()
    decision = publishgate.decide(agent) if gate else publishgate.not_required()
    if not decision.allowed:
        raise publishgate.PublishRefused(decision)
    last = agent.versions.aggregate(last=Max("number"))["last"] or 0
    return AgentVersion.objects.create(
        tenant_id=agent.tenant_id,
        agent=agent,
        number=last + 1,
        snapshot=agent.snapshot(),
        published_by=user if user is not None and user.is_authenticated else None,
        gate=decision.record,
    )


def agent_ensure(*, tenant: Tenant, spec: dict[str, Any]) -> tuple[Agent, bool]:
    """The agent named in `spec` (any of EDITABLE_FIELDS), created or brought back to it, and published when its
    draft differs from the published version. Returns (agent, whether a version was published). Used by demo data."""
    fields = {key: value for key, value in spec.items() if key != "name"}
    agent = Agent.objects.filter(tenant=tenant, name=spec["name"]).first()
    if agent is None:
        agent = agent_create(tenant=tenant, name=spec["name"], **fields)
    else:
        agent = agent_update(agent=agent, **fields)
    published = agent.published_version()
    if published is None or published.snapshot != agent.snapshot():
        agent_publish(agent=agent, user=None, gate=False)
        return agent, True
    return agent, False


def conversation_start(
    *,
    agent: Agent,
    user: AbstractBaseUser,
    title: str = "",
    parent: Conversation | None = None,
    draft: bool = False,
    source: str = ConversationSource.CHAT,
    visitor: Visitor | None = None,
    version: AgentVersion | None = None,
) -> Conversation:
    """Start a conversation on the agent's published version (else its draft), freezing its model and overflow
    strategy; `parent` marks a plan step's internal conversation. `draft` starts a test conversation on the draft
    even when a version is published: it has no version, so each turn runs the draft as it is then (the pages let
    only administrators start one). `source`/`visitor`: where it was started (chat, api, widget) and by which
    website visitor. `version`: one of the agent's published versions to run instead of the newest (an evaluation
    run of an older version)."""
    if version is not None:
        if version.agent_id != agent.pk:
            raise ValueError(f"version {version.pk} is not one of agent {agent.pk}'s")
        config = agent_config(agent=agent, version=version)
    elif draft:
        version, config = None, agent_config(agent=agent, version=None)
    else:
        published = published_config(agent)
        version, config = published.version, published.config
    return conversation_create(
        agent=agent,
        version=version,
        user=user,
        provider=config.provider,
        model=config.model,
        overflow_config=config.overflow,
        title=title,
        parent=parent,
        is_test=draft,
        source=source,
        visitor=visitor,
    )

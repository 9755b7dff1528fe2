"""Fixtures of the API tests: published agents of two tenants on the scripted model, and keys."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from agents.models import Agent
from agents.services import agent_create, agent_publish
from api.keys import key_create
from api.models import ApiKey
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory


@pytest.fixture(autouse=True)
def _isolated_streams(settings):
    """Each test its own chat frame log keys (conversation ids repeat across test databases)."""
    settings.CHAT_STREAM_PREFIX = f"test-api-{uuid.uuid4().hex[:12]}"


@dataclass
class Setup:
    solar: Agent  # published, in `tenant`
    pv: Agent  # published, in `tenant`
    draft: Agent  # never published, in `tenant`
    foreign: Agent  # published, in `other_tenant`


@pytest.fixture
def published(tenant, other_tenant, scripted_llm) -> Setup:
    def make(owner, name: str, publish: bool = True) -> Agent:
        with tenant_scope(owner):
            agent = agent_create(tenant=owner, name=name, system_prompt="You advise.", model="gpt-4")
            if publish:
                agent_publish(agent=agent, user=None)
            return agent

    for owner in (tenant, other_tenant):
        with tenant_scope(owner):
            ModelProviderFactory(tenant=owner, name="scripted", base_url=scripted_llm.base_url, is_default=True)
    return Setup(
        solar=make(tenant, "Solar advisor"),
        pv=make(tenant, "光伏测算"),
        draft=make(tenant, "Unfinished", publish=False),
        foreign=make(other_tenant, "Noodle chef"),
    )


@pytest.fixture
def make_key(tenant):
    """make_key(user, tenant=tenant, **options) -> (ApiKey, secret)."""

    def make(user: Any, owner=None, **options: Any) -> tuple[ApiKey, str]:
        owner = owner or tenant
        with tenant_scope(owner):
            return key_create(tenant=owner, user=user, name=options.pop("name", "test key"), **options)

    return make

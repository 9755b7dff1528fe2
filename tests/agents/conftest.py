"""Fixtures of the agent tests."""

import pytest

from tenants.scope import tenant_scope
from tests.agents.factories import AgentFactory


@pytest.fixture
def agents(tenant, other_tenant):
    with tenant_scope(tenant):
        mine = AgentFactory(tenant=tenant, name="Solar advisor")
    with tenant_scope(other_tenant):
        theirs = AgentFactory(tenant=other_tenant, name="Noodle chef")
    return {"mine": mine, "theirs": theirs}

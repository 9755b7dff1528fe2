"""Fixtures of the conversation-memory tests: an agent and a provider pointing at the scripted server."""

import pytest

from agents.services import agent_create
from memory.longterm import store
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory


@pytest.fixture(autouse=True)
def _fresh_memory_collections():
    """The search collections are per process and keyed by ids a rolled-back database hands out again."""
    store.clear_caches()
    yield
    store.clear_caches()


@pytest.fixture(autouse=True)
def _fast_retries(settings):
    settings.LLM_RETRY_BASE_DELAY = 0.01
    settings.LLM_RETRY_MAX_DELAY = 0.02


@pytest.fixture
def scripted_provider(tenant, scripted_llm):
    """`tenant`'s default provider: the scripted server, no retries inside the client (the task retries)."""
    with tenant_scope(tenant):
        return ModelProviderFactory(
            tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True, max_retries=0
        )


@pytest.fixture
def make_agent(tenant):
    def _make(name="Solar advisor", **config):
        with tenant_scope(tenant):
            return agent_create(
                tenant=tenant, name=name, system_prompt="You advise on solar panels.", model="gpt-4",
                token_overflow_config=config or {"strategy": "none"},
            )  # fmt: skip

    return _make

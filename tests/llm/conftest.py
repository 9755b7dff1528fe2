"""Fixtures of the model-gateway tests: providers pointing at the scripted server, short retry delays."""

import pytest

from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory

SECRET_KEY_VALUE = "sk-test-SECRET-0123456789abcdef"


@pytest.fixture(autouse=True)
def _fast_retries(settings):
    settings.LLM_RETRY_BASE_DELAY = 0.01
    settings.LLM_RETRY_MAX_DELAY = 0.05


@pytest.fixture
def provider(tenant, scripted_llm):
    """`tenant`'s default provider: the scripted server, with an API key."""
    with tenant_scope(tenant):
        return ModelProviderFactory(
            tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True, api_key=SECRET_KEY_VALUE
        )


@pytest.fixture
def other_provider(other_tenant, scripted_llm):
    with tenant_scope(other_tenant):
        return ModelProviderFactory(
            tenant=other_tenant, name="other scripted", base_url=scripted_llm.base_url, is_default=True
        )

"""Admin of providers and model calls: write-only API key, tenant isolation, the usage chart, no key in logs."""

from __future__ import annotations

import asyncio
import logging

import pytest
from django.core.management import call_command
from django.urls import reverse

from llm.client import complete_chat
from llm.errors import LLMError
from llm.messages import ChatMessage
from llm.models import LLMCall, ModelProvider
from llm.options import ChatRequest
from tenants.scope import all_tenants, tenant_scope
from tests.factories import refreshed
from tests.llm.conftest import SECRET_KEY_VALUE
from tests.llm.factories import LLMCallFactory, ModelProviderFactory

NEW_KEY = "sk-brand-NEW-key-9876543210zyxwvu"


def provider_form(**overrides) -> dict:
    data = {
        "name": "DeepSeek",
        "kind": "openai",
        "base_url": "https://api.deepseek.com/v1",
        "api_key": NEW_KEY,
        "chat_models": '[{"name": "deepseek-chat", "context_window": 65536, "function_calling": true}]',
        "default_chat_model": "deepseek-chat",
        "embedding_model": "",
        "planning_model": "",
        "execution_model": "deepseek-chat",
        "reasoning_model": "",
        "is_default": "on",
        "timeout_seconds": "60",
        "max_retries": "2",
    }
    data.update(overrides)
    return data


@pytest.mark.django_db
def test_tenant_admin_creates_a_provider_and_never_sees_the_key_again(tenant, tenant_admin, login, caplog):
    caplog.set_level(logging.DEBUG)
    client = login(tenant_admin, tenant)
    response = client.post(reverse("admin:llm_modelprovider_add"), provider_form())
    assert response.status_code == 302, response.content.decode()[:2000]

    with tenant_scope(tenant):
        provider = ModelProvider.objects.get(name="DeepSeek")
    assert provider.tenant == tenant
    assert provider.api_key() == NEW_KEY
    assert NEW_KEY not in provider.api_key_encrypted
    assert provider.model_for_tier("execution") == "deepseek-chat"
    assert provider.model_for_tier("planning") == "deepseek-chat"  # empty tier: the default chat model

    pages = [
        reverse("admin:llm_modelprovider_changelist"),
        reverse("admin:llm_modelprovider_change", args=[provider.pk]),
        reverse("admin:llm_modelprovider_history", args=[provider.pk]),
        reverse("admin:index"),
    ]
    for url in pages:
        body = client.get(url).content.decode()
        assert NEW_KEY not in body, url
        assert provider.api_key_encrypted not in body, url
    change_page = client.get(pages[1]).content.decode()
    assert "设置" in change_page or "set" in change_page

    # Saving without a key keeps it; ticking "remove" clears it.
    response = client.post(pages[1], provider_form(api_key=""))
    assert response.status_code == 302
    refreshed(provider)
    assert provider.api_key() == NEW_KEY
    client.post(pages[1], provider_form(api_key="", clear_api_key="on"))
    refreshed(provider)
    assert not provider.has_api_key
    assert NEW_KEY not in caplog.text


@pytest.mark.django_db
def test_provider_validation_names_the_field(tenant, tenant_admin, login):
    client = login(tenant_admin, tenant)
    response = client.post(reverse("admin:llm_modelprovider_add"), provider_form(default_chat_model="gpt-5"))
    assert response.status_code == 200
    assert "gpt-5" in response.content.decode()
    with tenant_scope(tenant):
        assert not ModelProvider.objects.exists()


@pytest.mark.django_db
def test_other_tenants_provider_and_calls_are_refused(tenant, other_tenant, tenant_admin, login):
    with tenant_scope(other_tenant):
        theirs = ModelProviderFactory(tenant=other_tenant, name="theirs", api_key=SECRET_KEY_VALUE)
        their_call = LLMCallFactory(tenant=other_tenant, provider=theirs, model="their-model")
    with tenant_scope(tenant):
        mine = ModelProviderFactory(tenant=tenant, name="mine")
        LLMCallFactory(tenant=tenant, provider=mine, model="my-model")
    client = login(tenant_admin, tenant)

    for url in (
        reverse("admin:llm_modelprovider_change", args=[theirs.pk]),
        reverse("admin:llm_llmcall_change", args=[their_call.pk]),
        reverse("admin:llm_modelprovider_delete", args=[theirs.pk]),
    ):
        response = client.get(url)
        assert response.status_code in (302, 404), url
        assert "theirs" not in response.content.decode()
    providers = client.get(reverse("admin:llm_modelprovider_changelist")).content.decode()
    assert "mine" in providers and "theirs" not in providers
    calls = client.get(reverse("admin:llm_llmcall_changelist")).content.decode()
    assert "my-model" in calls and "their-model" not in calls
    # A POST to the other tenant's provider changes nothing.
    client.post(reverse("admin:llm_modelprovider_change", args=[theirs.pk]), provider_form(name="hijacked"))
    with all_tenants(reason="test checks the other tenant's row"):
        assert ModelProvider.objects.get(pk=theirs.pk).name == "theirs"


@pytest.mark.django_db
def test_call_log_has_filters_and_is_read_only(tenant, tenant_admin, login):
    with tenant_scope(tenant):
        LLMCallFactory(tenant=tenant, status="error", error_code="rate_limited", model="m1")
        LLMCallFactory(tenant=tenant, status="ok", model="m2")
    client = login(tenant_admin, tenant)
    url = reverse("admin:llm_llmcall_changelist")
    response = client.get(url, {"status__exact": "error"})
    assert [call.model for call in response.context["cl"].result_list] == ["m1"]
    assert "rate_limited" in response.content.decode()
    assert client.get(url, {"purpose__exact": "chat", "error_code": "rate_limited"}).status_code == 200
    assert client.get(reverse("admin:llm_llmcall_add")).status_code == 403


@pytest.mark.django_db
def test_tenant_page_shows_the_tokens_per_day_chart_and_the_budget(
    tenant, other_tenant, superuser, tenant_admin, login
):
    with tenant_scope(tenant):
        LLMCallFactory(tenant=tenant, prompt_tokens=1200, completion_tokens=34)
    with tenant_scope(other_tenant):
        LLMCallFactory(tenant=other_tenant, prompt_tokens=50, completion_tokens=0)
    client = login(tenant_admin, tenant)
    page = client.get(reverse("admin:tenants_tenant_change", args=[tenant.pk])).content.decode()
    assert '<svg id="llm-usage-chart"' in page
    assert page.count('class="bar"') == 30
    assert 'data-tokens="1234"' in page
    assert "1,234 / 2,000,000" in page

    client = login(superuser)
    listing = client.get(reverse("admin:tenants_tenant_changelist")).content.decode()
    assert "1,234 / 2,000,000" in listing and "50 / 2,000,000" in listing


@pytest.mark.django_db(transaction=True)
def test_api_key_never_reaches_logs_or_errors(tenant, provider, scripted_llm, caplog):
    """Even when the provider echoes the key back in its error, neither logs nor the error carry it."""
    caplog.set_level(logging.DEBUG)
    scripted_llm.set_rules(
        {"when": {}, "reply": {"error": {"status": 401, "message": f"Incorrect API key provided: {SECRET_KEY_VALUE}"}}}
    )
    with pytest.raises(LLMError) as caught:
        asyncio.run(complete_chat(ChatRequest(messages=[ChatMessage.user("hi")]), tenant=tenant, provider=provider))
    assert caught.value.code == "auth_failed"
    scripted_llm.set_rules({"when": {}, "reply": {"text": "fine"}})
    asyncio.run(complete_chat(ChatRequest(messages=[ChatMessage.user("hi")]), tenant=tenant, provider=provider))

    assert SECRET_KEY_VALUE not in caplog.text
    assert SECRET_KEY_VALUE not in f"{caught.value} {caught.value.detail} {caught.value.message} {caught.value!r}"
    assert SECRET_KEY_VALUE not in repr(provider) and SECRET_KEY_VALUE not in str(provider)
    with tenant_scope(tenant):
        assert LLMCall.objects.filter(error_code="auth_failed").exists()


@pytest.mark.django_db
def test_seed_demo_gives_the_demo_model_and_the_home_page_says_so(client, settings):
    settings.OPENAI_API_KEY = settings.OPENAI_BASE_URL = ""
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115 (idempotent)
    with all_tenants(reason="test counts every tenant's providers"):
        providers = list(ModelProvider.objects.all())
    assert len(providers) == 2 and all(p.is_demo and p.is_default for p in providers)
    assert str(providers[0]) == "演示模型（离线脚本）/ Demo model (offline, scripted)"

    assert client.post(reverse("login"), {"username": "energy-member", "password": "demo-pass-2026"}).status_code == 302
    page = client.get(reverse("home")).content.decode()
    # The banner in the page's language (zh-hans): the product's words, not the provider's bilingual name.
    assert 'data-banner="demo-model"' in page and "<strong>演示模型（离线脚本）</strong>" in page


@pytest.mark.django_db
def test_seed_demo_uses_a_real_provider_from_the_environment(client, settings):
    settings.OPENAI_API_KEY = "sk-from-env-0123456789"
    settings.OPENAI_BASE_URL = "https://api.deepseek.com/v1"
    settings.OPENAI_MODEL = "deepseek-chat"
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    with all_tenants(reason="test reads every tenant's default provider"):
        defaults = list(ModelProvider.objects.filter(is_default=True))
        assert ModelProvider.objects.count() == 4  # a real one and the (non-default) demo one per tenant
    assert {(p.kind, p.default_chat_model, p.base_url) for p in defaults} == {
        ("openai", "deepseek-chat", "https://api.deepseek.com/v1")
    }
    assert all(p.api_key() == "sk-from-env-0123456789" for p in defaults)
    assert client.post(reverse("login"), {"username": "energy-member", "password": "demo-pass-2026"}).status_code == 302
    assert 'data-banner="demo-model"' not in client.get(reverse("home")).content.decode()

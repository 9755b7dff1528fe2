"""Writes: providers and the record of model calls."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from core.conf import setting
from core.netguard import UnresolvedHost, check_url
from llm import tokens
from llm.models import DEMO_LABEL, DEMO_MODEL, LLMCall, ModelProvider, ProviderKind, UsageSource
from tenants.models import Tenant
from tenants.scope import TenantScopeError, current_scope, tenant_scope

logger = logging.getLogger("llm.calls")


@contextlib.contextmanager
def scope_of(tenant: Tenant) -> Iterator[None]:
    """Enter `tenant`'s scope unless it (or an all-tenants bypass) is active; refuse inside another tenant's."""
    scope = current_scope()
    if scope is not None and (scope.is_bypass or scope.tenant.pk == tenant.pk):
        yield
        return
    if scope is not None:
        raise TenantScopeError(
            f"A call for tenant {tenant.pk} from inside tenant {scope.tenant.pk}'s scope is refused."
        )
    with tenant_scope(tenant):
        yield


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one call, and whether the provider reported them or we counted them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    source: str = UsageSource.PROVIDER

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def usage_counted(
    *,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Any,
    text: str,
    tool_calls: Sequence[Mapping[str, Any]] = (),
) -> Usage:
    """Usage counted with tiktoken, for servers that do not report it."""
    completion = tokens.count_text(text, model) + sum(
        tokens.count_text(f"{c.get('name', '')}{c.get('arguments', '')}", model) for c in tool_calls
    )
    return Usage(tokens.count_messages(messages, model, tools), completion, UsageSource.COUNTED)


def llm_call_record(
    *,
    tenant: Tenant,
    provider_id: int | None,
    model: str,
    purpose: str,
    status: str,
    usage: Usage | None = None,
    agent_id: int | None = None,
    conversation_id: int | None = None,
    ttft_ms: int | None = None,
    duration_ms: int = 0,
    error_code: str = "",
    finish_reason: str = "",
    attempts: int = 1,
) -> LLMCall:
    """Store one model call (every call, whatever its outcome) and log it (never with a key)."""
    usage = usage or Usage(source=UsageSource.COUNTED)
    with scope_of(tenant):
        call = LLMCall.objects.create(
            tenant=tenant,
            provider_id=provider_id,
            agent_id=agent_id,
            conversation_id=conversation_id,
            model=model[:200],
            purpose=purpose,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
            usage_source=usage.source,
            ttft_ms=ttft_ms,
            duration_ms=duration_ms,
            status=status,
            error_code=error_code,
            finish_reason=finish_reason or "",
            attempts=attempts,
        )
    logger.info(
        "llm call tenant=%s model=%s purpose=%s status=%s code=%s tokens=%s+%s ttft_ms=%s total_ms=%s attempts=%s",
        tenant.pk, model, purpose, status, error_code or "-", usage.prompt_tokens, usage.completion_tokens,
        ttft_ms, duration_ms, attempts,
    )  # fmt: skip
    return call


def _clear_other_defaults(provider: ModelProvider) -> None:
    ModelProvider.objects.filter(tenant=provider.tenant, is_default=True).exclude(pk=provider.pk).update(
        is_default=False
    )


def base_url_refused(provider: ModelProvider) -> str | None:
    """Why `provider`'s base URL may not be used, or None: a host name that does not resolve, or a private, loopback
    or link-local address (where the tenant's key and prompts would reach the platform's own network), unless the
    operator allowed private servers. Calls check again and connect to the address they checked (llm.transports)."""
    if provider.kind != ProviderKind.OPENAI or not provider.base_url:
        return None
    if provider.private_network_allowed or setting("LLM_ALLOW_PRIVATE_BASE_URLS"):
        return None
    try:
        checked = check_url(provider.base_url)
    except UnresolvedHost as exc:
        return _(
            "The host name %(host)s does not resolve to an address here; check the base URL for a typo. A name the "
            "platform cannot check is not accepted."
        ) % {"host": exc.host or provider.base_url}
    if checked.private:
        return _(
            "This base URL is a private, loopback or link-local address; the platform does not send tenants' "
            "requests there. The platform operator can allow it for this provider."
        )
    return None


@transaction.atomic
def provider_save(*, provider: ModelProvider, api_key: str | None = None, clear_api_key: bool = False) -> ModelProvider:
    """Validate and save a provider; a new `api_key` replaces the stored one, None keeps it. A changed base URL
    drops the stored key unless a key is given with it (the key was meant for the old server); then
    `provider.key_dropped` is True."""
    with scope_of(provider.tenant):
        provider.key_dropped = False
        if provider.pk and not api_key and provider.api_key_encrypted:
            stored_url = ModelProvider.objects.filter(pk=provider.pk).values_list("base_url", flat=True).first()
            if stored_url is not None and stored_url.rstrip("/") != (provider.base_url or "").rstrip("/"):
                clear_api_key = provider.key_dropped = True
        if clear_api_key:
            provider.api_key_encrypted = ""
        elif api_key:
            provider.set_api_key(api_key)
        refused = base_url_refused(provider)
        if refused:
            raise ValidationError({"base_url": refused})
        if provider.kind == ProviderKind.DEMO:
            provider.name = provider.name or DEMO_LABEL
        provider.full_clean(exclude=["tenant"])
        if provider.is_default:
            _clear_other_defaults(provider)
        elif not ModelProvider.objects.filter(tenant=provider.tenant, is_default=True).exclude(pk=provider.pk).exists():
            provider.is_default = True  # a tenant's first provider is its default
        provider.save()
    return provider


DEMO_CHAT_MODELS = [{"name": DEMO_MODEL, "context_window": 32768, "function_calling": True}]


@transaction.atomic
def provider_ensure_demo(*, tenant: Tenant, make_default: bool = True) -> ModelProvider:
    """The tenant's offline demo provider, created if missing (idempotent)."""
    with scope_of(tenant):
        provider = ModelProvider.objects.filter(tenant=tenant, kind=ProviderKind.DEMO).first() or ModelProvider(
            tenant=tenant
        )
        provider.kind = ProviderKind.DEMO
        provider.name = DEMO_LABEL
        provider.base_url = ""
        provider.chat_models = DEMO_CHAT_MODELS
        provider.default_chat_model = DEMO_MODEL
        provider.embedding_model = "demo-embed"
        provider.planning_model = provider.execution_model = provider.reasoning_model = DEMO_MODEL
        provider.is_default = make_default or provider.is_default
        return provider_save(provider=provider)


@transaction.atomic
def provider_ensure_openai(
    *,
    tenant: Tenant,
    name: str,
    base_url: str,
    api_key: str,
    model: str,
    context_window: int = 128000,
    make_default: bool = True,
) -> ModelProvider:
    """An OpenAI-compatible provider named `name`, created or brought up to date (idempotent)."""
    with scope_of(tenant):
        provider = ModelProvider.objects.filter(tenant=tenant, name=name).first() or ModelProvider(
            tenant=tenant, name=name
        )
        provider.kind = ProviderKind.OPENAI
        provider.base_url = base_url
        provider.chat_models = [{"name": model, "context_window": context_window, "function_calling": True}]
        provider.default_chat_model = model
        provider.planning_model = provider.execution_model = provider.reasoning_model = ""
        provider.is_default = make_default or provider.is_default
        return provider_save(provider=provider, api_key=api_key or None, clear_api_key=not api_key)

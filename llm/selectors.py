"""Reads of providers and usage."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from core.conf import setting
from llm.models import LLMCall, ModelProvider, Tier
from llm.transports import Connection
from tenants.models import Tenant


def month_start(now: dt.datetime | None = None) -> dt.datetime:
    """Midnight of the first day of the current calendar month, in the platform's time zone."""
    local = timezone.localtime(now or timezone.now())
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def tokens_used_this_month(*, tenant: Tenant, now: dt.datetime | None = None) -> int:
    """Prompt + completion tokens of the tenant's calls since the month began (needs the tenant's scope)."""
    total = LLMCall.objects.filter(tenant=tenant, created_at__gte=month_start(now)).aggregate(
        total=Sum("total_tokens")
    )["total"]
    return int(total or 0)


def tokens_per_day(*, tenant: Tenant, days: int = 30, now: dt.datetime | None = None) -> list[tuple[dt.date, int]]:
    """(day, tokens) for each of the last `days` days, oldest first, zeros included (for the admin chart)."""
    today = timezone.localdate(now or timezone.now())
    first = today - dt.timedelta(days=days - 1)
    start = timezone.make_aware(dt.datetime.combine(first, dt.time.min))
    rows = (
        LLMCall.objects.filter(tenant=tenant, created_at__gte=start)
        .annotate(day=TruncDate("created_at", tzinfo=timezone.get_current_timezone()))
        .values("day")
        .annotate(total=Sum("total_tokens"))
    )
    by_day = {row["day"]: int(row["total"] or 0) for row in rows}
    return [(first + dt.timedelta(days=i), by_day.get(first + dt.timedelta(days=i), 0)) for i in range(days)]


def default_provider(*, tenant: Tenant) -> ModelProvider | None:
    """The tenant's default provider (or its only/first one)."""
    providers = ModelProvider.objects.filter(tenant=tenant)
    return providers.filter(is_default=True).first() or providers.order_by("pk").first()


def connection_for(provider: ModelProvider) -> Connection:
    """How to reach `provider`, with its API key decrypted (keep the result in memory only)."""
    return Connection(
        kind=provider.kind,
        base_url=provider.base_url,
        api_key=provider.api_key(),
        timeout=provider.timeout_seconds,
        max_retries=provider.max_retries,
        provider_id=provider.pk,
        private_allowed=provider.private_network_allowed or bool(setting("LLM_ALLOW_PRIVATE_BASE_URLS")),
    )


@dataclass(frozen=True)
class TierChoice:
    provider: ModelProvider
    model: str


def model_for_tier(*, tenant: Tenant, tier: str | Tier, provider: ModelProvider | None = None) -> TierChoice | None:
    """The provider and model of a seed-3 tier (planning, execution, reasoning) for the tenant."""
    provider = provider or default_provider(tenant=tenant)
    if provider is None:
        return None
    return TierChoice(provider=provider, model=provider.model_for_tier(tier))

"""Usage figures for the admin: tokens this month against the budget, and the tokens-per-day chart (an SVG)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import IntegerField, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from llm.models import LLMCall
from llm.selectors import month_start, tokens_per_day, tokens_used_this_month
from llm.services import scope_of
from tenants.models import Tenant

CHART_WIDTH, CHART_HEIGHT, CHART_PAD = 720, 220, 44


def tokens_this_month_subquery() -> Coalesce:
    """An annotation for a Tenant queryset: each tenant's tokens this month (one query for a whole changelist)."""
    calls = (
        LLMCall.objects.filter(tenant=OuterRef("pk"), created_at__gte=month_start())
        .order_by()
        .values("tenant")
        .annotate(total=Sum("total_tokens"))
        .values("total")
    )
    return Coalesce(Subquery(calls, output_field=IntegerField()), 0)


def budget_cell(used: int, budget: int) -> str:
    """ "12,345 / 2,000,000 (1%)" for the tenants list."""
    percent = f" ({used * 100 // budget}%)" if budget else ""
    return f"{used:,} / {budget:,}{percent}"


def _nice_ceiling(value: int) -> int:
    if value <= 0:
        return 10
    magnitude = 10 ** (len(str(value)) - 1)
    for step in (1, 2, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return 10 * magnitude


def usage_chart(*, tenant: Tenant, days: int = 30, now: dt.datetime | None = None) -> dict[str, Any]:
    """Everything the tenant page's usage block draws: the month's total against the budget and daily bars."""
    with scope_of(tenant):
        series = tokens_per_day(tenant=tenant, days=days, now=now)
        used = tokens_used_this_month(tenant=tenant, now=now)
    top = _nice_ceiling(max((value for _, value in series), default=0))
    plot_w, plot_h = CHART_WIDTH - CHART_PAD - 10, CHART_HEIGHT - CHART_PAD
    slot = plot_w / len(series)
    bars = []
    for i, (day, value) in enumerate(series):
        height = round(plot_h * value / top, 1)
        bars.append(
            {
                "x": round(CHART_PAD + i * slot + slot * 0.15, 1),
                "y": round(10 + plot_h - height, 1),
                "width": round(slot * 0.7, 1),
                "height": height,
                "day": day,
                "value": value,
                "label": day.strftime("%m-%d") if i % 5 == 0 or i == len(series) - 1 else "",
                "label_x": round(CHART_PAD + i * slot + slot / 2, 1),
            }
        )
    budget = tenant.monthly_token_budget
    return {
        "bars": bars,
        "top": top,
        "mid": top // 2,
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
        "pad": CHART_PAD,
        "plot_bottom": 10 + plot_h,
        "plot_mid": 10 + plot_h / 2,
        "plot_right": CHART_WIDTH - 10,
        "days": days,
        "total": sum(value for _, value in series),
        "used": used,
        "budget": budget,
        "percent": min(100, used * 100 // budget) if budget else 100,
        "cell": budget_cell(used, budget),
    }

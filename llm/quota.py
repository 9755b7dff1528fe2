"""T5: a tenant's monthly token budget, checked before any request is sent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llm import tokens
from llm.errors import QUOTA_EXCEEDED, LLMError
from llm.selectors import tokens_used_this_month
from tenants.models import Tenant


def quota_check(*, tenant: Tenant, model: str, messages: Sequence[Mapping[str, Any]], tools: Any = None) -> int:
    """Raise LLMError(quota_exceeded) when the prompt would take the tenant past its monthly budget.

    Returns the tokens used this month. The prompt is counted exactly only near the budget: far from it, a cheap
    upper bound (bytes) is enough to know the call fits. The completion is not known yet; it may overshoot the
    budget by at most its own length (bound it with max_tokens).
    """
    budget = tenant.monthly_token_budget
    used = tokens_used_this_month(tenant=tenant)
    if used + tokens.upper_bound_messages(messages, tools) <= budget:
        return used
    prompt = tokens.count_messages(messages, model, tools)
    if used + prompt > budget or budget == 0:
        raise LLMError(
            QUOTA_EXCEEDED,
            detail=f"tenant {tenant.pk}: used {used} + prompt {prompt} > monthly budget {budget}",
        )
    return used

"""T5: a tenant's monthly token budget, checked before any request is sent.

The database is the truth (the sum of the month's LLMCall rows). So that a call far from the budget costs no
database round trip before its first token, each process keeps a small ledger: the month's usage read at most
LLM_QUOTA_CACHE_SECONDS ago plus what this process has used since. The ledger only ever lets a call through
when it fits with room to spare; a call that might not fit is always checked against the database, so a stale
ledger can never refuse a call, and can let usage from other processes go unseen for at most those seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.conf import setting
from llm import tokens
from llm.errors import QUOTA_EXCEEDED, LLMError
from llm.selectors import month_start, tokens_used_this_month
from tenants.models import Tenant


@dataclass
class _Entry:
    used: int
    loaded_at: float


_ledger: dict[tuple, _Entry] = {}
_lock = threading.Lock()


def _key(tenant: Tenant) -> tuple:
    # created_at tells apart two tenants that had the same id (test databases reuse ids after a rollback).
    return (tenant.pk, tenant.created_at, month_start().strftime("%Y-%m"))


def quota_fits_cached(*, tenant: Tenant, messages: Sequence[Mapping[str, Any]], tools: Any = None) -> bool:
    """True when the ledger shows the call fits for sure; False means "ask the database" (quota_check)."""
    ttl = setting("LLM_QUOTA_CACHE_SECONDS")
    if ttl <= 0:
        return False
    entry = _ledger.get(_key(tenant))
    if entry is None or time.monotonic() - entry.loaded_at > ttl:
        return False
    return entry.used + tokens.upper_bound_messages(messages, tools) <= tenant.monthly_token_budget


def quota_ledger_add(*, tenant: Tenant, tokens: int) -> None:
    """Count tokens this process just used (its rows may still be on their way to the database)."""
    budget_ledger_add(_key(tenant), tokens)


def quota_check(*, tenant: Tenant, model: str, messages: Sequence[Mapping[str, Any]], tools: Any = None) -> int:
    """Raise LLMError(quota_exceeded) when the prompt would take the tenant past its monthly budget.

    Reads the database (needs the tenant's scope) and refreshes the ledger; returns the tokens used this month.
    The prompt is counted exactly only near the budget: far from it, a cheap upper bound (bytes) is enough. The
    completion is not known yet; it may overshoot the budget by at most its own length (bound it with max_tokens).
    """
    budget = tenant.monthly_token_budget
    used = tokens_used_this_month(tenant=tenant)
    with _lock:
        _ledger[_key(tenant)] = _Entry(used=used, loaded_at=time.monotonic())
    if used + tokens.upper_bound_messages(messages, tools) <= budget:
        return used
    prompt = tokens.count_messages(messages, model, tools)
    if used + prompt > budget or budget == 0:
        raise LLMError(
            QUOTA_EXCEEDED,
            detail=f"tenant {tenant.pk}: used {used} + prompt {prompt} > monthly budget {budget}",
        )
    return used


@dataclass(frozen=True)
class Budget:
    """A budget of tokens beside the tenant's own: `limit` tokens per period, what was `used` summed in SQL by the
    caller's query (e.g. an embed token's daily budget); `key` names it and its period in the ledger."""

    key: tuple
    limit: int
    used: Callable[[], int]


def budget_spent(budget: Budget) -> bool:
    """True when `budget` is used up; the ledger keeps its sum for LLM_QUOTA_CACHE_SECONDS while far below it."""
    if not budget.limit:
        return False
    ttl = setting("LLM_QUOTA_CACHE_SECONDS")
    entry = _ledger.get(budget.key)
    if entry is not None and ttl > 0 and time.monotonic() - entry.loaded_at <= ttl and entry.used < budget.limit:
        return False
    used = budget.used()
    with _lock:
        _ledger[budget.key] = _Entry(used=used, loaded_at=time.monotonic())
    return used >= budget.limit


def quota_spent(*, tenant: Tenant) -> bool:
    """True when the tenant's monthly budget is used up: a new message would only fail at its first model call
    (a budget of 0 allows no call). The ledger answers while far from it; otherwise the database does."""
    if tenant.monthly_token_budget == 0:
        return True
    return budget_spent(
        Budget(key=_key(tenant), limit=tenant.monthly_token_budget, used=lambda: tokens_used_this_month(tenant=tenant))
    )


def budget_ledger_add(key: tuple, tokens: int) -> None:
    """Count tokens this process just used against the budget `key` (as quota_ledger_add does for the tenant's)."""
    if tokens:
        with _lock:
            entry = _ledger.get(key)
            if entry is not None:
                entry.used += tokens

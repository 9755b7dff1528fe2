"""The tenant scope: which tenant the current code may read and write.

The scope is a ContextVar, so it follows a request through threads and coroutines. It is entered in one place
per entry point (HTTP middleware, websocket consumer, Celery task). `all_tenants(reason=...)` is the only way
to see every tenant's rows; grep for it to find every bypass.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

logger = logging.getLogger(__name__)


class TenantScopeError(RuntimeError):
    """Tenant data was touched outside a tenant scope, or across tenants."""


class TenantLike(Protocol):
    """A tenant as the scope holds it: a `tenants.models.Tenant`. The scope is the floor under the managers and the
    models, which use it, so it names the model by what it needs of it (its key) instead of importing it."""

    pk: Any


@dataclass(frozen=True)
class Scope:
    tenant: TenantLike | None
    # Set only by all_tenants(): every tenant's rows are visible, and why.
    bypass_reason: str | None = None

    @property
    def is_bypass(self) -> bool:
        return self.bypass_reason is not None


_current: ContextVar[Scope | None] = ContextVar("tenant_scope", default=None)


def current_scope() -> Scope | None:
    return _current.get()


def current_tenant() -> TenantLike | None:
    """The tenant of the active scope, or None (no scope, or an all-tenants bypass)."""
    scope = _current.get()
    return scope.tenant if scope else None


def require_tenant() -> TenantLike:
    """The active tenant; raises when code that needs one runs outside a tenant scope."""
    tenant = current_tenant()
    if tenant is None:
        raise TenantScopeError("This needs an active tenant: enter tenant_scope(tenant) first.")
    return tenant


@contextlib.contextmanager
def tenant_scope(tenant: TenantLike) -> Iterator[TenantLike]:
    """Run the block with `tenant` as the only tenant whose rows can be read or written."""
    if tenant is None or tenant.pk is None:
        raise TenantScopeError("tenant_scope() needs a saved tenant.")
    token = _current.set(Scope(tenant=tenant))
    try:
        yield tenant
    finally:
        _current.reset(token)


@contextlib.contextmanager
def all_tenants(*, reason: str) -> Iterator[None]:
    """The one explicit bypass: every tenant's rows are visible inside the block. Say why."""
    if not reason or not reason.strip():
        raise ValueError("all_tenants() needs a reason, e.g. all_tenants(reason='platform superuser in the admin').")
    logger.debug("tenant scope bypassed: %s", reason)
    token = _current.set(Scope(tenant=None, bypass_reason=reason))
    try:
        yield
    finally:
        _current.reset(token)


@contextlib.contextmanager
def no_scope() -> Iterator[None]:
    """Leave any active scope for the block (used by tests to prove that queries refuse)."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)

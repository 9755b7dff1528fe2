"""Websocket consumers enter the tenant scope in one place: their dispatch."""

from __future__ import annotations

import contextlib

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from core.db import database_sync_to_async
from tenants.middleware import SESSION_KEY
from tenants.scope import tenant_scope
from tenants.selectors import resolve_membership


class TenantScopedJsonConsumer(AsyncJsonWebsocketConsumer):
    """Resolves the session's active tenant once per connection and handles every message inside its scope.

    `self.tenant` and `self.membership` are set before `connect()` runs; both are None for a user without a tenant.
    `connect_reads()` lets a consumer read what it needs in the same database hop.
    """

    tenant = None
    membership = None
    _resolved = False

    async def dispatch(self, message: dict) -> None:
        if not self._resolved:
            session = self.scope.get("session")
            tenant_id = session.get(SESSION_KEY) if session is not None else None
            await database_sync_to_async(self._resolve)(tenant_id)
            self._resolved = True
        scope = tenant_scope(self.tenant) if self.tenant is not None else contextlib.nullcontext()
        with scope:
            await super().dispatch(message)

    def _resolve(self, tenant_id: int | None) -> None:
        self.tenant, self.membership = resolve_membership(user=self.scope["user"], tenant_id=tenant_id)
        if self.tenant is not None:
            with tenant_scope(self.tenant):
                self.connect_reads()

    def connect_reads(self) -> None:
        """Database reads a consumer needs at connect, run in the tenant's scope in the same database hop as the
        membership (one trip to the database thread per connect). Override; `self.tenant` is set."""

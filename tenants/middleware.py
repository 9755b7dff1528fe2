"""Enters the active tenant's scope for the whole request (T2: no tenant query runs without one)."""

from __future__ import annotations

import contextlib

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from core.middleware import DualModeMiddleware
from tenants.scope import all_tenants, tenant_scope
from tenants.selectors import resolve_membership

SESSION_KEY = "active_tenant_id"


class TenantScopeMiddleware(DualModeMiddleware):
    """Sets request.tenant and request.membership from the session and runs the view inside that tenant's scope.

    A platform superuser in the admin sees every tenant (the admin shows a tenant column and filter). Works in both
    modes: under ASGI an async view (the API's streamed answers) runs on the event loop without a thread hop; the
    session and membership are read in one hop to the database thread.
    """

    def handle(self, request: HttpRequest) -> HttpResponse:
        with self._resolve(request):
            return self.get_response(request)

    async def ahandle(self, request: HttpRequest) -> HttpResponse:
        scope = await sync_to_async(self._resolve)(request)
        with scope:
            return await self.get_response(request)

    def _resolve(self, request: HttpRequest) -> contextlib.AbstractContextManager:
        """Set request.tenant and request.membership; return the scope to run the view in."""
        tenant, membership = resolve_membership(user=request.user, tenant_id=request.session.get(SESSION_KEY))
        request.tenant = tenant
        request.membership = membership
        if tenant is not None and request.session.get(SESSION_KEY) != tenant.pk:
            request.session[SESSION_KEY] = tenant.pk

        if (
            request.user.is_authenticated
            and request.user.is_superuser
            and request.path.startswith(reverse("admin:index"))
        ):
            return all_tenants(reason="platform superuser in the admin")
        if tenant is not None:
            return tenant_scope(tenant)
        return contextlib.nullcontext()

"""Enters the active tenant's scope for the whole request (T2: no tenant query runs without one)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from tenants.scope import all_tenants, tenant_scope
from tenants.selectors import resolve_membership

SESSION_KEY = "active_tenant_id"


class TenantScopeMiddleware:
    """Sets request.tenant and request.membership from the session and runs the view inside that tenant's scope.

    A platform superuser in the admin sees every tenant (the admin shows a tenant column and filter).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
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
            scope = all_tenants(reason="platform superuser in the admin")
        elif tenant is not None:
            scope = tenant_scope(tenant)
        else:
            scope = contextlib.nullcontext()
        with scope:
            return self.get_response(request)

from __future__ import annotations

from django.http import HttpRequest

from tenants.selectors import switchable_tenants


def tenancy(request: HttpRequest) -> dict:
    """The active tenant, the user's role in it and the tenants they can switch to, for the navigation bar."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        "active_tenant": getattr(request, "tenant", None),
        "active_membership": getattr(request, "membership", None),
        "switchable_tenants": switchable_tenants(user=user),
    }

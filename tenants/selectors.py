"""Reads about tenants and memberships that span relations."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from tenants.models import Membership, Role, Tenant


def memberships_for_user(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Membership]:
    """The user's memberships in active tenants, for the tenant switcher."""
    if not user.is_authenticated:
        return Membership.objects.none()
    return Membership.objects.filter(user=user, tenant__active=True).select_related("tenant").order_by("tenant__name")


def switchable_tenants(*, user: AbstractBaseUser | AnonymousUser) -> list[Tenant]:
    """Tenants the user may make active: their memberships, or every active tenant for a platform superuser."""
    if not user.is_authenticated:
        return []
    if user.is_superuser:
        return list(Tenant.objects.filter(active=True).order_by("name"))
    return [m.tenant for m in memberships_for_user(user=user)]


def resolve_membership(
    *, user: AbstractBaseUser | AnonymousUser, tenant_id: int | None
) -> tuple[Tenant | None, Membership | None]:
    """The tenant the user may act in, preferring `tenant_id` (from the session), and their membership there.

    A superuser may act in any active tenant; without a membership they act with the owner's rights.
    """
    if not user.is_authenticated:
        return None, None
    memberships = list(memberships_for_user(user=user))
    chosen = next((m for m in memberships if m.tenant_id == tenant_id), None)
    if chosen is not None:
        return chosen.tenant, chosen
    if user.is_superuser and tenant_id is not None:
        tenant = Tenant.objects.filter(pk=tenant_id, active=True).first()
        if tenant is not None:
            return tenant, Membership(user=user, tenant=tenant, role=Role.OWNER)
    if memberships:
        return memberships[0].tenant, memberships[0]
    if user.is_superuser:
        # A platform operator with no membership works in the first active tenant until they switch.
        tenant = Tenant.objects.filter(active=True).order_by("name").first()
        if tenant is not None:
            return tenant, Membership(user=user, tenant=tenant, role=Role.OWNER)
    return None, None

"""Writes about tenants and memberships."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from core.registry import Registry, qualified_name
from tenants.models import Membership, Role, Tenant
from tenants.packs import get_pack


@transaction.atomic
def tenant_ensure(*, slug: str, name: str, monthly_token_budget: int | None = None) -> Tenant:
    """Create the tenant, or bring an existing one's name (and budget, if given) up to date."""
    defaults: dict = {"name": name, "active": True}
    if monthly_token_budget is not None:
        defaults["monthly_token_budget"] = monthly_token_budget
    tenant, _ = Tenant.objects.update_or_create(slug=slug, defaults=defaults)
    return tenant


TenantCleanup = Callable[[Tenant], None]
_cleanups: Registry[TenantCleanup] = Registry("the tenant cleanups (tenants.services)")


def register_tenant_cleanup(cleanup: TenantCleanup) -> None:
    """Let an app above this one remove what goes with a tenant beyond its rows (stored files, a knowledge base's
    own vector index): `cleanup(tenant)` runs in tenant_delete's transaction, before the tenant's rows go."""
    _cleanups.register(qualified_name(cleanup), cleanup)


@transaction.atomic
def tenant_delete(*, tenant: Tenant) -> None:
    """Delete a tenant and everything it owns: each app's cleanup first (register_tenant_cleanup), then the rows
    (their foreign keys cascade)."""
    for cleanup in _cleanups:
        cleanup(tenant)
    tenant.delete()


@transaction.atomic
def tenant_packs_enable(*, tenant: Tenant, keys: Iterable[str]) -> Tenant:
    """Enable the packs `keys` for `tenant` (those already enabled stay); an unregistered key is refused."""
    unknown = [key for key in keys if get_pack(key) is None]
    if unknown:
        raise ValueError(f"No pack is registered as {', '.join(map(repr, unknown))}.")
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    packs = sorted({*(tenant.packs or []), *keys})
    if packs != tenant.packs:
        tenant.packs = packs
        tenant.save(update_fields=["packs"])
    return tenant


@transaction.atomic
def user_ensure(
    *, username: str, password: str, is_staff: bool = False, is_superuser: bool = False
) -> AbstractBaseUser:
    """Create the user or reset it to the given password and flags (used by the demo seed)."""
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username=username)
    user.is_staff = is_staff or is_superuser
    user.is_superuser = is_superuser
    user.is_active = True
    user.set_password(password)
    user.save()
    return user


def membership_set(*, user: AbstractBaseUser, tenant: Tenant, role: Role) -> Membership:
    """Give the user `role` in `tenant`, adding the membership if needed."""
    membership, _ = Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": role})
    return membership

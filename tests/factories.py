"""Factories for the tenancy layer; each app's tests add their own beside it."""

import factory
from django.contrib.auth import get_user_model

from tenants.models import Membership, Role, Tenant


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ["slug"]

    name = factory.Sequence(lambda n: f"Tenant {n}")
    slug = factory.Sequence(lambda n: f"tenant-{n}")


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", "pw")

    @factory.post_generation
    def _save(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = Role.MEMBER


def with_packs(tenant: Tenant, *keys: str) -> Tenant:
    """`tenant` (the same object, brought up to date) with the packs `keys` enabled, as the platform operator
    enables them (Admin › Tenants)."""
    from tenants.services import tenant_packs_enable

    tenant.packs = tenant_packs_enable(tenant=tenant, keys=keys).packs
    return tenant


def refreshed(obj):
    """`obj.refresh_from_db()` in its tenant's scope: outside any scope PostgreSQL's row-level security shows no
    tenant row, not even to `_base_manager` (tenants.rls)."""
    from tenants.scope import tenant_scope

    with tenant_scope(obj.tenant):
        obj.refresh_from_db()
    return obj

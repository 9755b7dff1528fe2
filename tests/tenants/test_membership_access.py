"""Memberships have no row-level security (the Info finding), by choice: they are what a request's tenant scope is
made of, so they are read before there is a scope (login, the middleware choosing the active tenant) and across
tenants (the switcher), where a tenant policy would show nothing. What protects them instead: every read is keyed by
the requesting user (tenants.selectors), and only a tenant's own administrators, or the platform operator, reach its
members in the admin. docs/security.md, "Row-level security"."""

from __future__ import annotations

import pytest
from django.db import connection
from django.urls import reverse

from tenants.models import Role
from tenants.scope import no_scope
from tenants.selectors import memberships_for_user, resolve_membership
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def stranger(other_tenant):
    user = UserFactory(username="stranger")
    MembershipFactory(user=user, tenant=other_tenant, role=Role.OWNER)
    return user


def test_info_memberships_are_read_before_any_scope_and_only_the_users_own(member, tenant, other_tenant, stranger):
    with no_scope():
        chosen, membership = resolve_membership(user=member, tenant_id=other_tenant.pk)  # a forged session choice
        mine = list(memberships_for_user(user=member))
    assert chosen == tenant and membership.user == member
    assert [(m.user, m.tenant) for m in mine] == [(member, tenant)]
    if connection.vendor == "postgresql":  # the choice docs/security.md explains: no policy on this table
        with connection.cursor() as cursor:
            cursor.execute("SELECT relrowsecurity FROM pg_class WHERE relname = 'tenants_membership'")
            assert cursor.fetchone() == (False,)


def test_info_a_tenant_admin_reaches_only_its_own_tenants_members(login, tenant_admin, tenant, other_tenant, stranger):
    client = login(tenant_admin, tenant)
    own = client.get(reverse("admin:tenants_tenant_change", args=[tenant.pk]))
    assert own.status_code == 200 and tenant_admin.username in own.content.decode()
    assert "stranger" not in own.content.decode()
    theirs = client.get(reverse("admin:tenants_tenant_change", args=[other_tenant.pk]))
    assert theirs.status_code == 302 and "stranger" not in theirs.content.decode()  # back to the index
    assert client.get(reverse("admin:tenants_membership_changelist")).status_code == 403  # the platform-wide list

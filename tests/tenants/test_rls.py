"""Row-level security (tenants.rls): the database itself refuses another tenant's rows, whatever the query."""

import pytest
from django.db import DatabaseError, connection, transaction

from tenants import rls
from tenants.scope import all_tenants, no_scope, tenant_scope
from tests.tenancy_fixture.models import Project

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row-level security is PostgreSQL's"),
]

TABLE = "tenancy_fixture_project"  # Project._meta.db_table, spelled out in the SQL below


@pytest.fixture
def projects(tenant, other_tenant):
    with tenant_scope(tenant):
        mine = Project.objects.create(name="mine")
    with tenant_scope(other_tenant):
        theirs = Project.objects.create(name="theirs")
    return mine, theirs


def _raw(sql, params=()):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def test_every_tenant_owned_table_has_the_policy_forced():
    tables = rls.tenant_tables()
    assert Project._meta.db_table == TABLE and TABLE in tables
    assert "agents_agent" in tables and "memory_event" in tables and len(tables) > 30
    rows = _raw(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
        "EXISTS (SELECT 1 FROM pg_policies p WHERE p.tablename = c.relname AND p.policyname = %s) "
        "FROM pg_class c WHERE c.relname = ANY(%s)",
        [rls.POLICY, tables],
    )
    assert sorted(row[0] for row in rows) == tables
    assert all(row[1] and row[2] and row[3] for row in rows), [row for row in rows if not all(row[1:])]


def test_raw_sql_in_another_tenants_scope_sees_nothing_of_it(projects, tenant, other_tenant):
    _mine, theirs = projects
    with tenant_scope(tenant):
        assert _raw("SELECT name FROM tenancy_fixture_project ORDER BY id") == [("mine",)]
        assert _raw("SELECT count(*) FROM tenancy_fixture_project WHERE tenant_id = %s", [other_tenant.pk]) == [(0,)]
        assert _raw("UPDATE tenancy_fixture_project SET name = 'taken' WHERE id = %s RETURNING id", [theirs.pk]) == []
        assert Project._base_manager.filter(pk=theirs.pk).count() == 0  # past the scoped manager too
    with all_tenants(reason="test: both tenants' rows"):
        assert sorted(name for (name,) in _raw("SELECT name FROM tenancy_fixture_project")) == ["mine", "theirs"]


def test_a_write_into_another_tenant_is_refused_by_the_database(projects, tenant, other_tenant):
    with tenant_scope(tenant), pytest.raises(DatabaseError, match="row-level security"), transaction.atomic():
        _raw("INSERT INTO tenancy_fixture_project (tenant_id, name) VALUES (%s, 'smuggled')", [other_tenant.pk])
    with all_tenants(reason="test: nothing was written"):
        assert _raw("SELECT count(*) FROM tenancy_fixture_project WHERE name = 'smuggled'") == [(0,)]


def test_outside_any_scope_raw_sql_sees_no_tenant_rows(projects):
    with no_scope():
        assert _raw("SELECT count(*) FROM tenancy_fixture_project") == [(0,)]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_never_leaves_its_scope_behind(tenant, other_tenant):
    with tenant_scope(tenant):
        Project.objects.create(name="mine")
    with tenant_scope(other_tenant):
        Project.objects.create(name="theirs")
    with tenant_scope(tenant):
        assert _raw("SELECT name FROM tenancy_fixture_project") == [("mine",)]  # autocommit: set for the session
    try:
        with transaction.atomic(), tenant_scope(other_tenant):
            assert _raw("SELECT name FROM tenancy_fixture_project") == [("theirs",)]  # for this transaction only
            with transaction.atomic(), tenant_scope(tenant):
                assert _raw("SELECT name FROM tenancy_fixture_project") == [("mine",)]
            assert _raw("SELECT name FROM tenancy_fixture_project") == [("theirs",)]  # back after the savepoint
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    with tenant_scope(tenant):
        assert _raw("SELECT name FROM tenancy_fixture_project") == [("mine",)]
    with tenant_scope(other_tenant):
        assert _raw("SELECT name FROM tenancy_fixture_project") == [("theirs",)]
    with no_scope():
        assert _raw("SELECT count(*) FROM tenancy_fixture_project") == [(0,)]


def test_the_application_role_is_subject_to_row_level_security():
    assert _raw("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user") == [(False, False)]
    assert rls.check_role(databases=["default"]) == []

"""The scoped manager (T2): refuses outside a scope, returns only the scope's rows inside it."""

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from tenants.scope import TenantScopeError, all_tenants, no_scope, require_tenant, tenant_scope
from tests.tenancy_fixture.models import Project, Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def projects(tenant, other_tenant):
    with tenant_scope(tenant):
        mine = Project.objects.create(name="mine")
        Task.objects.create(project=mine, title="my task")
    with tenant_scope(other_tenant):
        theirs = Project.objects.create(name="theirs")
        Task.objects.create(project=theirs, title="their task")
    return mine, theirs


def test_query_outside_a_scope_raises(projects):
    with no_scope(), pytest.raises(TenantScopeError, match="outside a tenant scope"):
        list(Project.objects.all())


@pytest.mark.parametrize(
    "run",
    [
        lambda: Project.objects.count(),
        lambda: Project.objects.exists(),
        lambda: Project.objects.get(name="mine"),
        lambda: Project.objects.filter(name="mine").update(name="x"),
        lambda: Project.objects.all().delete(),
        lambda: list(Task.objects.filter(project__in=Project.objects.all())),
    ],
    ids=["count", "exists", "get", "update", "delete", "subquery"],
)
def test_every_kind_of_query_refuses_outside_a_scope(projects, run):
    # A savepoint: update() and delete() mark the enclosing transaction for rollback when they raise.
    with no_scope(), pytest.raises(TenantScopeError), transaction.atomic():
        run()
    with all_tenants(reason="test: nothing was changed by the refused query"):
        assert Project.objects.filter(name__in=["mine", "theirs"]).count() == 2


def test_scope_returns_only_its_tenant_rows(projects, tenant, other_tenant):
    mine, theirs = projects
    with tenant_scope(tenant):
        assert list(Project.objects.all()) == [mine]
        assert [t.title for t in Task.objects.all()] == ["my task"]
        assert not Project.objects.filter(pk=theirs.pk).exists()
        assert Project.objects.filter(pk=theirs.pk).update(name="hijacked") == 0
    with tenant_scope(other_tenant):
        assert list(Project.objects.all()) == [theirs]
        assert Project.objects.get().name == "theirs"


def test_queryset_built_outside_a_scope_uses_the_scope_it_runs_in(projects, tenant, other_tenant):
    # A form field or class attribute builds its queryset at import time: the filter binds when it runs.
    queryset = Project.objects.order_by("name")
    with tenant_scope(tenant):
        assert [p.name for p in queryset.all()] == ["mine"]
    with tenant_scope(other_tenant):
        assert [p.name for p in queryset.all()] == ["theirs"]


def test_all_tenants_sees_everything_and_needs_a_reason(projects):
    with all_tenants(reason="test: platform report"):
        assert sorted(p.name for p in Project.objects.all()) == ["mine", "theirs"]
    with pytest.raises(ValueError, match="reason"), all_tenants(reason=" "):
        pass


def test_writes_outside_a_scope_or_across_tenants_are_refused(projects, tenant, other_tenant):
    _mine, theirs = projects
    with no_scope(), pytest.raises(TenantScopeError):
        Project(tenant=tenant, name="orphan").save()
    with tenant_scope(tenant):
        with pytest.raises(TenantScopeError):
            Project(tenant=other_tenant, name="planted").save()
        with pytest.raises(TenantScopeError):
            theirs.delete()
        created = Project.objects.create(name="auto")
        assert created.tenant_id == tenant.pk


def test_a_row_may_not_point_at_another_tenants_row(projects, tenant):
    _mine, theirs = projects
    with tenant_scope(tenant):
        task = Task(project=theirs, title="cross")
        with pytest.raises(ValidationError) as excinfo:
            task.full_clean()
        assert "project" in excinfo.value.message_dict


def test_require_tenant(tenant):
    with pytest.raises(TenantScopeError):
        require_tenant()
    with tenant_scope(tenant):
        assert require_tenant() == tenant


def test_reverse_relations_are_scoped(projects, tenant):
    mine, _ = projects
    with tenant_scope(tenant):
        assert [t.title for t in mine.tasks.all()] == ["my task"]
    with no_scope(), pytest.raises(TenantScopeError):
        list(mine.tasks.all())


def test_scoped_queryset_as_a_correlated_subquery(projects, tenant, other_tenant):
    from django.db.models import Count, IntegerField, OuterRef, Subquery

    from tenants.models import Tenant

    per_tenant = Project.objects.filter(tenant=OuterRef("pk")).values("tenant").annotate(n=Count("pk")).values("n")
    annotated = Tenant.objects.annotate(projects=Subquery(per_tenant, output_field=IntegerField())).order_by("slug")
    with all_tenants(reason="test: per-tenant counts"):
        assert {t.slug: t.projects for t in annotated.all()} == {"energy": 1, "restaurant": 1}
    with tenant_scope(tenant):
        # Inside a tenant scope the subquery still sees only that tenant's rows.
        assert {t.slug: t.projects for t in annotated.all()} == {"energy": 1, "restaurant": None}
    with no_scope(), pytest.raises(TenantScopeError):
        list(annotated.all())

"""tenant_task: a Celery task runs in its tenant's scope, and does nothing for a tenant deleted since it was queued."""

import pytest
from celery import shared_task

from tenants.models import Tenant
from tenants.scope import current_tenant, no_scope, tenant_scope
from tenants.taskscope import tenant_task
from tests.tenancy_fixture.models import Project

pytestmark = pytest.mark.django_db


@shared_task(name="tests.tenants.count_projects")
@tenant_task()
def count_projects(tenant_id: int, prefix: str = "") -> tuple[str, int]:
    return current_tenant().slug, Project.objects.filter(name__startswith=prefix).count()


@shared_task(name="tests.tenants.bound_count", bind=True)
@tenant_task(gone=-1)
def bound_count(self, tenant_id: int) -> int:
    return Project.objects.count()


@pytest.fixture
def projects(tenant, other_tenant):
    with tenant_scope(tenant):
        Project.objects.create(name="a mine")
    with tenant_scope(other_tenant):
        Project.objects.create(name="a theirs")
        Project.objects.create(name="b theirs")


def test_the_task_runs_in_its_tenants_scope(tenant, other_tenant, projects):
    with no_scope():
        assert count_projects(tenant.pk) == (tenant.slug, 1)
        assert count_projects.delay(tenant_id=other_tenant.pk, prefix="b").get() == (other_tenant.slug, 1)
        assert bound_count.apply(args=(other_tenant.pk,)).get() == 2
        assert current_tenant() is None  # the scope ends with the task


def test_a_deleted_tenant_is_gone(tenant, projects):
    missing = Tenant.objects.order_by("-pk").first().pk + 1
    assert count_projects(missing) == "gone"
    assert bound_count.apply(args=(missing,)).get() == -1
    assert count_projects.delay(missing, prefix="a").get() == "gone"

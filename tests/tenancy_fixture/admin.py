from django.contrib import admin

from tenants.admin import TenantOwnedAdmin
from tests.tenancy_fixture.models import Project, Task


@admin.register(Project)
class ProjectAdmin(TenantOwnedAdmin):
    list_display = ["name"]


@admin.register(Task)
class TaskAdmin(TenantOwnedAdmin):
    list_display = ["title", "project"]

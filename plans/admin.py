"""The plans admin (O1): a plan with its steps and its log (state changes, model calls, tool calls), read-only."""

from django.contrib import admin
from django.http import HttpRequest

from plans.models import Plan, PlanLog, PlanStep
from tenants.admin import TenantOwnedAdmin, TenantOwnedAdminMixin


class _ReadOnlyInline(admin.TabularInline):
    """Rows the executor writes: tenant and platform admins see them (the parent plan is already tenant-checked)."""

    extra = 0
    can_delete = False

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return TenantOwnedAdminMixin._may_administer(self, request)

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class PlanStepInline(_ReadOnlyInline):
    model = PlanStep
    fields = ("seqNo", "agentName", "requirement", "status", "depends_on", "result")
    readonly_fields = fields


class PlanLogInline(_ReadOnlyInline):
    model = PlanLog
    fields = ("created_at", "step", "kind", "data")
    readonly_fields = fields


@admin.register(Plan)
class PlanAdmin(TenantOwnedAdmin):
    list_display = ("name", "status", "userQuery", "conversation", "created_at")
    list_filter = ("status",)
    readonly_fields = ("planId", "conversation", "userQuery", "context", "status", "allow_concurrency")
    inlines = [PlanStepInline, PlanLogInline]

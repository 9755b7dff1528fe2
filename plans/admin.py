from django.contrib import admin

from plans.models import Plan, PlanLog, PlanStep
from tenants.admin import TenantOwnedAdmin


class PlanStepInline(admin.TabularInline):
    model = PlanStep
    extra = 0
    fields = ("seqNo", "agentName", "requirement", "status", "depends_on", "result")
    readonly_fields = fields
    can_delete = False


class PlanLogInline(admin.TabularInline):
    model = PlanLog
    extra = 0
    fields = ("created_at", "step", "kind", "data")
    readonly_fields = fields
    can_delete = False


@admin.register(Plan)
class PlanAdmin(TenantOwnedAdmin):
    list_display = ("name", "status", "userQuery", "conversation", "created_at")
    list_filter = ("status",)
    readonly_fields = ("planId", "conversation", "userQuery", "context", "status")
    inlines = [PlanStepInline, PlanLogInline]

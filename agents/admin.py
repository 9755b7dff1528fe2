from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from agents.forms import AgentForm
from agents.goal.models import GoalRun, GoalStep
from agents.models import Agent, AgentVersion, ToolHttpAllowedHost, Workflow, WorkflowRun
from agents.publishgate import PublishRefused
from agents.services import agent_publish
from memory.feedback import feedback_annotations, feedback_counts, feedback_totals
from tenants.admin import TenantOwnedAdmin, TenantOwnedAdminMixin


class AgentVersionInline(TenantOwnedAdminMixin, admin.TabularInline):
    model = AgentVersion
    extra = 0
    can_delete = False
    fields = ["number", "published_at", "published_by", "feedback", "snapshot"]
    readonly_fields = fields
    ordering = ["-number"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._counts: dict[int, dict[int | None, dict]] = {}

    @admin.display(description=_("feedback (👍 / 👎)"))
    def feedback(self, obj: AgentVersion) -> str:
        # An inline is made per request: the agent's counts are read once for all its version rows.
        if obj.agent_id not in self._counts:
            self._counts[obj.agent_id] = {row["version"]: row for row in feedback_counts(agent_id=obj.agent_id)}
        row = self._counts[obj.agent_id].get(obj.number, {"up": 0, "down": 0})
        return f"{row['up']} / {row['down']}"

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Agent)
class AgentAdmin(TenantOwnedAdmin):
    form = AgentForm
    list_display = ["name", "kind", "model", "active", "feedback", "updated_at"]
    list_filter = ["kind", "active"]
    search_fields = ["name", "description"]
    inlines = [AgentVersionInline]
    actions = ["publish"]
    readonly_fields = ["slug", "feedback"]
    fieldsets = [
        (None, {"fields": ["tenant", "name", "slug", "description", "kind", "active", "feedback"]}),
        (_("Model"), {"fields": ["system_prompt", "provider", "model", "temperature", "max_reply_tokens"]}),
        (_("Tools and knowledge"), {"fields": ["tools", "knowledge_bases"]}),
        (_("Long-term memory"), {"fields": ["long_term_memory", "memory_extraction"]}),
        (
            _("Token management"),
            {
                "fields": [
                    "overflow_strategy",
                    "overflow_preset",
                    "overflow_max_tokens",
                    "overflow_reserve_ratio",
                    "overflow_summary_threshold",
                ]
            },
        ),
    ]

    @admin.display(description=_("feedback (👍 / 👎)"))
    def feedback(self, obj: Agent) -> str:
        """Thumbs up and down of the agent's replies, all versions (per version: the versions below)."""
        if obj.pk is None:
            return "-"
        if hasattr(obj, "feedback_up"):  # the list's rows carry their counts (get_queryset)
            return f"{obj.feedback_up} / {obj.feedback_down}"
        totals = feedback_totals(agent_id=obj.pk)
        return f"{totals['up']} / {totals['down']}"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Agent]:
        return super().get_queryset(request).annotate(**feedback_annotations())

    @admin.action(description=_("Publish the selected agents as a new version"))
    def publish(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        count = 0
        for agent in queryset:
            try:
                agent_publish(agent=agent, user=request.user)
            except PublishRefused as refused:
                self.message_user(request, f"{agent.name}: {refused.message}", messages.ERROR)
                continue
            count += 1
        self.message_user(
            request,
            ngettext("Published %(count)d agent.", "Published %(count)d agents.", count) % {"count": count},
            messages.SUCCESS,
        )


@admin.register(ToolHttpAllowedHost)
class ToolHttpAllowedHostAdmin(TenantOwnedAdmin):
    list_display = ["host", "note", "created_at"]
    search_fields = ["host", "note"]
    fields = ["tenant", "host", "note"]


@admin.register(Workflow)
class WorkflowAdmin(TenantOwnedAdmin):
    """Workflows; the YAML is validated on save (Workflow.clean names the step, field and line of each error)."""

    list_display = ["name", "description", "agent", "updated_at"]
    search_fields = ["name", "description"]
    fields = ["tenant", "name", "description", "agent", "yaml"]
    actions = ["export_yaml"]

    @admin.action(description=_("Export the selected workflows as YAML"))
    def export_yaml(self, request, queryset):

        text = "---\n".join(w.yaml if w.yaml.endswith("\n") else w.yaml + "\n" for w in queryset.order_by("name"))
        response = HttpResponse(text, content_type="application/x-yaml; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="workflows.yaml"'
        return response


@admin.register(WorkflowRun)
class WorkflowRunAdmin(TenantOwnedAdmin):
    list_display = ["workflow", "status", "started_at", "duration_ms"]
    list_filter = ["status"]
    readonly_fields = ["workflow", "conversation", "status", "inputs", "outputs", "log", "error", "duration_ms"]


class GoalStepInline(TenantOwnedAdminMixin, admin.TabularInline):
    """What the loop did, step by step: written by the loop only."""

    model = GoalStep
    extra = 0
    can_delete = False
    fields = ["iteration", "kind", "name", "arguments", "summary", "ok", "tokens", "duration_ms", "at"]
    readonly_fields = fields
    ordering = ["id"]

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(GoalRun)
class GoalRunAdmin(TenantOwnedAdmin):
    """Runs of long-lived goal agents, read-only: they are started, answered and stopped on their pages."""

    list_display = ["goal_short", "agent", "user", "status", "limit_reached", "iterations", "tokens", "started_at"]
    list_filter = ["status", "limit_reached", "agent"]
    search_fields = ["goal", "result"]
    date_hierarchy = "started_at"
    inlines = [GoalStepInline]
    fields = [
        "tenant", "agent", "user", "goal", "status", "limit_reached", "stop_requested", "result", "error",
        "max_iterations", "max_tokens_per_hour", "max_wall_seconds", "iterations", "tool_calls", "dreams", "tokens",
        "question", "asked_at", "ask_deadline", "started_at", "ended_at",
    ]  # fmt: skip
    readonly_fields = fields

    @admin.display(description=_("goal"))
    def goal_short(self, obj: GoalRun) -> str:
        return obj.goal[:80]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

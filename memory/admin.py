from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from memory.models import Conversation, ConversationContext, Message, OverflowMetric
from tenants.admin import TenantOwnedAdmin, TenantOwnedAdminMixin


class ReadOnlyMixin:
    """Conversation data is written by the platform, not edited by hand."""

    def has_add_permission(self, request: HttpRequest, *args) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class MessageInline(ReadOnlyMixin, TenantOwnedAdminMixin, admin.TabularInline):
    model = Message
    extra = 0
    can_delete = False
    fields = [
        "id",
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "token_count",
        "status",
        "error_code",
        "created_at",
    ]
    readonly_fields = fields
    ordering = ["id"]


class ConversationContextInline(ReadOnlyMixin, TenantOwnedAdminMixin, admin.StackedInline):
    model = ConversationContext
    can_delete = False
    fields = [
        "strategy",
        "strategy_config",
        "summary",
        "active_messages",
        "summarized_through",
        "summary_pending",
        "summary_queued_at",
    ]
    readonly_fields = fields


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyMixin, TenantOwnedAdmin):
    list_display = ["__str__", "agent", "version", "user", "model", "updated_at"]
    list_select_related = ["agent", "version", "user"]
    search_fields = ["title"]
    fields = ["agent", "version", "user", "provider", "model", "title", "memory_key", "created_at", "updated_at"]
    readonly_fields = fields
    inlines = [ConversationContextInline, MessageInline]

    @admin.display(description=_("memory key"))
    def memory_key(self, obj: Conversation) -> str:
        return obj.memory_key


@admin.register(Message)
class MessageAdmin(ReadOnlyMixin, TenantOwnedAdmin):
    list_display = ["id", "conversation", "role", "status", "token_count", "created_at"]
    list_filter = ["role", "status"]
    list_select_related = ["conversation"]
    search_fields = ["content"]
    readonly_fields = [
        "conversation",
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "token_count",
        "client_id",
        "status",
        "error_code",
        "usage",
        "created_at",
    ]
    fields = readonly_fields


@admin.register(OverflowMetric)
class OverflowMetricAdmin(ReadOnlyMixin, TenantOwnedAdmin):
    list_display = ["day", "agent_id", "triggers", "summaries_made", "summaries_failed", "tokens_saved"]
    list_filter = ["day"]
    fields = list_display
    readonly_fields = list_display
    date_hierarchy = "day"

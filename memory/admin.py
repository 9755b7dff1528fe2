from __future__ import annotations

from django.contrib import admin
from django.db.models import Count
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from memory.longterm.forget import event_delete, memory_item_delete
from memory.models import (
    Attachment,
    Conversation,
    ConversationContext,
    Dream,
    Entity,
    Event,
    EventRelation,
    Feedback,
    MemoryItem,
    MemoryMetric,
    Message,
    OverflowMetric,
    TurnMemory,
)
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
    list_display = ["__str__", "agent", "version", "source", "is_test", "user", "model", "updated_at"]
    list_select_related = ["agent", "version", "user"]
    list_filter = ["source", "is_test"]
    search_fields = ["title"]
    fields = ["agent", "version", "source", "visitor", "is_test", "user", "provider", "model", "title", "memory_key",
              "created_at", "updated_at"]  # fmt: skip
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
    list_display = [
        "day", "agent_id", "triggers", "summaries_made", "summaries_failed", "summaries_retried", "tokens_saved",
    ]  # fmt: skip
    list_filter = ["day"]
    fields = list_display
    readonly_fields = list_display
    date_hierarchy = "day"


# --- long-term memory ----------------------------------------------------------------------------------------------
# The platform writes long-term memory (extraction, recall, sleep): administrators read it and may delete events and
# memories (through the services the memory page uses), but never edit them (a changed text would keep the old
# embedding and keywords). ReadOnlyMixin leaves deletion to the tenant's administrators, as every tenant-owned admin.

OWNER_FILTERS = [("user", admin.RelatedOnlyFieldListFilter), "key"]


class NoDeleteMixin(ReadOnlyMixin):
    """Read-only, deletion refused: counters and indexes the platform keeps."""

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class EventRelationInline(ReadOnlyMixin, TenantOwnedAdminMixin, admin.TabularInline):
    model = EventRelation
    fk_name = "source"
    extra = 0
    can_delete = False
    fields = ["kind", "target"]
    readonly_fields = fields
    verbose_name = _("relation from this event")
    verbose_name_plural = _("relations from this event")


class IncomingRelationInline(EventRelationInline):
    fk_name = "target"
    fields = ["source", "kind"]
    readonly_fields = fields
    verbose_name = _("relation to this event")
    verbose_name_plural = _("relations to this event")


@admin.register(Event)
class EventAdmin(ReadOnlyMixin, TenantOwnedAdmin):
    list_display = [
        "event_id",
        "timestamp",
        "user",
        "key",
        "actor",
        "action_type",
        "short_summary",
        "status",
        "superseded_by",
    ]
    list_filter = [*OWNER_FILTERS, "actor", "status", "action_type"]
    list_select_related = ["user", "superseded_by"]
    search_fields = ["content_summary", "event_id"]
    date_hierarchy = "timestamp"
    fields = [
        "event_id",
        "user",
        "key",
        "agent_id",
        "timestamp",
        "actor",
        "action_type",
        "content_summary",
        "entities",
        "status",
        "related_event_ids",
        "superseded_by",
        "superseded_at",
        "conversation",
        "source_message_ids",
        "embedder",
        "created_at",
    ]
    readonly_fields = fields
    inlines = [EventRelationInline, IncomingRelationInline]

    @admin.display(description=_("summary"))
    def short_summary(self, obj: Event) -> str:
        return obj.content_summary[:80]

    def delete_model(self, request: HttpRequest, obj: Event) -> None:
        event_delete(event=obj)

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        for event in queryset:
            event_delete(event=event)


@admin.register(Entity)
class EntityAdmin(ReadOnlyMixin, TenantOwnedAdmin):
    list_display = ["name", "type", "user", "key", "event_count"]
    list_filter = [*OWNER_FILTERS, "type"]
    list_select_related = ["user"]
    search_fields = ["name"]
    fields = ["name", "normalized", "type", "user", "key", "events"]
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).annotate(number_of_events=Count("events"))

    @admin.display(description=_("events"), ordering="number_of_events")
    def event_count(self, obj: Entity) -> int:
        return obj.number_of_events


@admin.register(MemoryItem)
class MemoryItemAdmin(ReadOnlyMixin, TenantOwnedAdmin):
    list_display = ["short_text", "user", "key", "level", "long_term", "time", "recalls"]
    list_filter = [*OWNER_FILTERS, "level", "long_term"]
    list_select_related = ["user"]
    search_fields = ["text"]
    fields = ["text", "user", "key", "level", "long_term", "time", "recalls", "conversation", "embedder", "created_at"]
    readonly_fields = fields

    @admin.display(description=_("text"))
    def short_text(self, obj: MemoryItem) -> str:
        return obj.text[:80]

    def delete_model(self, request: HttpRequest, obj: MemoryItem) -> None:
        memory_item_delete(item=obj)


@admin.register(TurnMemory)
class TurnMemoryAdmin(NoDeleteMixin, TenantOwnedAdmin):
    list_display = ["short_text", "user", "key", "conversation", "user_message_id", "created_at"]
    list_filter = OWNER_FILTERS
    list_select_related = ["user", "conversation"]
    search_fields = ["text"]
    fields = ["text", "user", "key", "conversation", "user_message_id", "reply_message_id", "embedder", "created_at"]
    readonly_fields = fields

    @admin.display(description=_("text"))
    def short_text(self, obj: TurnMemory) -> str:
        return obj.text[:80]


@admin.register(Dream)
class DreamAdmin(ReadOnlyMixin, TenantOwnedAdmin):
    list_display = ["__str__", "user", "key", "created_at"]
    list_filter = OWNER_FILTERS
    list_select_related = ["user"]
    search_fields = ["text"]
    fields = ["text", "fragments", "user", "key", "created_at"]
    readonly_fields = fields


@admin.register(MemoryMetric)
class MemoryMetricAdmin(NoDeleteMixin, TenantOwnedAdmin):
    list_display = [
        "day",
        "agent_id",
        "extractions",
        "events_added",
        "repaired",
        "skipped",
        "duplicates",
        "superseded",
        "dreams",
        "forgotten",
    ]
    list_filter = ["day"]
    fields = list_display
    readonly_fields = list_display
    date_hierarchy = "day"


@admin.register(Feedback)
class FeedbackAdmin(ReadOnlyMixin, TenantOwnedAdmin):
    list_display = ["message", "rating", "comment", "source", "user", "updated_at"]
    list_filter = ["rating", "source"]
    list_select_related = ["message", "user"]
    fields = ["message", "rating", "comment", "source", "user", "created_at", "updated_at"]
    readonly_fields = fields


@admin.register(Attachment)
class AttachmentAdmin(ReadOnlyMixin, TenantOwnedAdmin):
    """The files sent in conversations: what they are and where they went; neither their text nor their bytes
    (those are served only to the conversation's readers). Deleting one removes its file."""

    list_display = ["name", "kind", "content_type", "size", "conversation", "message", "user", "indexed", "created_at"]
    list_select_related = ["conversation", "user"]
    list_filter = ["kind", "indexed", "from_ocr"]
    search_fields = ["name"]
    fields = ["name", "kind", "content_type", "size", "sha256", "width", "height", "pages", "from_ocr", "token_count",
              "indexed", "conversation", "message", "user", "created_at"]  # fmt: skip
    readonly_fields = fields

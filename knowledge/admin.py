"""Admin of knowledge bases, documents (upload, status, progress, errors, re-ingest) and chunks (read-only).

Built on TenantOwnedAdmin: a tenant admin sees and changes only the active tenant's rows. The active vector
backend (pgvector or exact) shows on the knowledge-base pages.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet, Sum
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from knowledge.forms import check_chunk_settings
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services import (
    REINGEST_FIELDS,
    document_add,
    document_check_upload,
    document_reingest,
    knowledge_base_delete,
    knowledge_base_reingest,
)
from knowledge.vectorstore import backend_name
from tenants.admin import TenantOwnedAdmin, TenantOwnedAdminMixin


def vector_backend_label() -> str:
    """The active vector backend, as the admin shows it."""
    name = backend_name()
    if name == "pgvector":
        return str(_("pgvector (HNSW index, cosine distance)"))
    return str(_("exact (in-process cosine search; the database has no pgvector)"))


class KnowledgeBaseAdminForm(forms.ModelForm):
    class Meta:
        model = KnowledgeBase
        fields = ["tenant", "name", "description", "embedder", "embedding_model", "chunk_size", "chunk_overlap"]

    def clean(self):
        cleaned = super().clean()
        check_chunk_settings(self, cleaned)
        return cleaned


class DocumentInline(TenantOwnedAdminMixin, admin.TabularInline):
    model = Document
    extra = 0
    can_delete = False
    fields = ["document_link", "status", "stage", "progress", "chunk_count", "error", "updated_at"]
    readonly_fields = fields
    ordering = ["-created_at"]
    show_change_link = False

    @admin.display(description=_("document"))
    def document_link(self, obj: Document) -> str:
        return format_html('<a href="{}">{}</a>', reverse("admin:knowledge_document_change", args=[obj.pk]), obj.name)

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(TenantOwnedAdmin):
    form = KnowledgeBaseAdminForm
    list_display = ["name", "embedder", "embedding_model", "chunk_size", "document_total", "chunk_total", "updated_at"]
    list_filter = ["embedder"]
    search_fields = ["name", "description"]
    readonly_fields = ["vector_backend", "revision", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["tenant", "name", "description"]}),
        (_("Embeddings and chunking"), {"fields": ["embedder", "embedding_model", "chunk_size", "chunk_overlap"]}),
        (_("Search"), {"fields": ["vector_backend", "revision", "created_at", "updated_at"]}),
    ]
    inlines = [DocumentInline]
    actions = ["reingest_all"]
    change_list_template = "knowledge/admin/knowledgebase_change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[KnowledgeBase]:
        return (
            super()
            .get_queryset(request)
            .annotate(document_count=Count("documents"), chunk_sum=Sum("documents__chunk_count"))
        )

    @admin.display(description=_("documents"), ordering="document_count")
    def document_total(self, obj: KnowledgeBase) -> int:
        return obj.document_count

    @admin.display(description=_("chunks"), ordering="chunk_sum")
    def chunk_total(self, obj: KnowledgeBase) -> int:
        return obj.chunk_sum or 0

    @admin.display(description=_("vector search backend"))
    def vector_backend(self, obj: KnowledgeBase | None = None) -> str:
        return vector_backend_label()

    def changelist_view(self, request: HttpRequest, extra_context=None):
        extra_context = {**(extra_context or {}), "vector_backend": vector_backend_label()}
        return super().changelist_view(request, extra_context)

    def save_model(self, request: HttpRequest, obj: KnowledgeBase, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if change and any(name in form.changed_data for name in REINGEST_FIELDS):
            count = knowledge_base_reingest(knowledge_base=obj)
            if count:
                self.message_user(
                    request,
                    ngettext(
                        "The embedding or chunk settings changed: %(count)d document is being ingested again.",
                        "The embedding or chunk settings changed: %(count)d documents are being ingested again.",
                        count,
                    )
                    % {"count": count},
                    messages.INFO,
                )

    def delete_model(self, request: HttpRequest, obj: KnowledgeBase) -> None:
        knowledge_base_delete(knowledge_base=obj)  # its stored files and its own vector index go too

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[KnowledgeBase]) -> None:
        for knowledge_base in queryset:
            knowledge_base_delete(knowledge_base=knowledge_base)

    @admin.action(description=_("Re-ingest every document of the selected knowledge bases"))
    def reingest_all(self, request: HttpRequest, queryset: QuerySet[KnowledgeBase]) -> None:
        count = sum(knowledge_base_reingest(knowledge_base=kb) for kb in queryset)
        self.message_user(
            request,
            ngettext("Queued %(count)d document.", "Queued %(count)d documents.", count) % {"count": count},
            messages.SUCCESS,
        )


class DocumentUploadForm(forms.ModelForm):
    """Adding a document in the admin is an upload: the knowledge base and the file; the rest is read from it."""

    class Meta:
        model = Document
        fields = ["knowledge_base", "file"]

    def clean_file(self):
        upload = self.cleaned_data["file"]
        try:
            document_check_upload(name=upload.name, size=upload.size)
        except ValidationError as exc:
            raise forms.ValidationError(exc.messages) from None
        return upload


DOCUMENT_READONLY = [
    "knowledge_base",
    "name",
    "file",
    "file_type",
    "size",
    "sha256",
    "status",
    "stage",
    "progress",
    "error",
    "chunk_count",
    "embedded_with",
    "ingested_at",
    "created_at",
    "updated_at",
]


@admin.register(Document)
class DocumentAdmin(TenantOwnedAdmin):
    list_display = ["name", "knowledge_base", "file_type", "status", "stage", "progress", "chunk_count", "short_error"]
    list_filter = ["status", "file_type", "knowledge_base"]
    search_fields = ["name", "error"]
    list_select_related = ["knowledge_base"]
    actions = ["reingest"]

    def get_form(self, request: HttpRequest, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = DocumentUploadForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request: HttpRequest, obj=None):
        return ["knowledge_base", "file"] if obj is None else DOCUMENT_READONLY

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        return [] if obj is None else DOCUMENT_READONLY

    @admin.display(description=_("error"))
    def short_error(self, obj: Document) -> str:
        return obj.error[:120] + ("…" if len(obj.error) > 120 else "")

    def save_model(self, request: HttpRequest, obj: Document, form, change: bool) -> None:
        if change:
            return  # every field is read-only; a new version of the file is uploaded as a new document
        upload = form.cleaned_data["file"]
        document = document_add(
            knowledge_base=form.cleaned_data["knowledge_base"], name=upload.name, content=upload.read()
        )
        # The admin's redirect and message use `obj`: make it the stored document.
        obj.pk = document.pk
        obj.name = document.name
        obj.tenant_id = document.tenant_id
        obj._state.adding = False

    @admin.action(description=_("Re-ingest the selected documents"))
    def reingest(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        count = 0
        for document in queryset:
            document_reingest(document=document)
            count += 1
        self.message_user(
            request,
            ngettext("Queued %(count)d document.", "Queued %(count)d documents.", count) % {"count": count},
            messages.SUCCESS,
        )


@admin.register(Chunk)
class ChunkAdmin(TenantOwnedAdmin):
    list_display = ["__str__", "document", "position", "token_count", "embedding_model", "embedding_dim", "preview"]
    list_filter = ["knowledge_base", "embedding_model"]
    search_fields = ["text"]
    list_select_related = ["document"]
    show_full_result_count = False  # counting every chunk of a large tenant is slow and says little
    fields = [
        "knowledge_base",
        "document",
        "position",
        "text",
        "token_count",
        "embedding_model",
        "embedding_dim",
        "embedding_head",
        "terms",
        "metadata",
    ]
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Chunk]:
        return super().get_queryset(request).defer("embedding", "terms")

    @admin.display(description=_("text"))
    def preview(self, obj: Chunk) -> str:
        return obj.text[:100] + ("…" if len(obj.text) > 100 else "")

    @admin.display(description=_("embedding (first values)"))
    def embedding_head(self, obj: Chunk) -> str:
        if not obj.embedding:
            return "—"
        return "[" + ", ".join(f"{value:.4f}" for value in obj.embedding[:8]) + f", …] ({len(obj.embedding)})"

    def has_add_permission(self, request: HttpRequest, *args) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

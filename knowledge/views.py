"""The knowledge pages (outside the admin): knowledge bases, their documents with live ingestion progress, and a
search page per knowledge base.

Every member of the tenant sees the knowledge bases and searches them; owners and admins create, change, upload,
re-ingest and delete. Another tenant's knowledge base or document is a 404 on every page and endpoint (the
request's tenant scope finds nothing).
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import ngettext, pgettext_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from knowledge.embedders import EmbedderError
from knowledge.forms import KnowledgeBaseForm, SearchForm, UploadForm
from knowledge.models import Document, KnowledgeBase
from knowledge.parsing import max_upload_bytes, supported_extensions
from knowledge.retrieval import search
from knowledge.selectors import (
    document_get,
    document_list,
    document_progress,
    knowledge_base_get,
    knowledge_base_list_for_page,
    outdated_documents,
)
from knowledge.services import (
    REINGEST_FIELDS,
    document_add,
    document_delete,
    document_reingest,
    knowledge_base_create,
    knowledge_base_delete,
    knowledge_base_reingest,
    knowledge_base_update,
)
from tenants.decorators import administrators_only, may_administer, tenant_required

# Owners and admins change; members read (tenants.decorators says it once for every page).
may_edit_knowledge = may_administer
editors_only = administrators_only("knowledge/forbidden.html")


def _knowledge_base_or_404(knowledge_base_id: int) -> KnowledgeBase:
    try:
        return knowledge_base_get(knowledge_base_id=knowledge_base_id)
    except KnowledgeBase.DoesNotExist:
        raise Http404(_("No such knowledge base in this tenant.")) from None


def _document_or_404(knowledge_base: KnowledgeBase, document_id: int) -> Document:
    try:
        return document_get(knowledge_base=knowledge_base, document_id=document_id)
    except Document.DoesNotExist:
        raise Http404(_("No such document in this knowledge base.")) from None


def _add_service_errors(form: KnowledgeBaseForm, error: ValidationError) -> None:
    if hasattr(error, "error_dict"):
        for field, errors in error.message_dict.items():
            if field == "tenant":
                continue
            form.add_error(field if field in form.fields else None, errors)
    if not form.errors:
        form.add_error(None, error.messages)


def _detail_url(knowledge_base: KnowledgeBase) -> str:
    return reverse("knowledge:detail", args=[knowledge_base.pk])


@tenant_required
@require_GET
def knowledge_base_list(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "knowledge/list.html",
        {"knowledge_bases": knowledge_base_list_for_page(), "may_edit": may_edit_knowledge(request)},
    )


@editors_only
@require_http_methods(["GET", "POST"])
def knowledge_base_new(request: HttpRequest) -> HttpResponse:
    form = KnowledgeBaseForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            knowledge_base = knowledge_base_create(
                tenant=request.tenant, name=form.cleaned_data["name"], **form.service_fields()
            )
        except ValidationError as exc:
            _add_service_errors(form, exc)
        else:
            messages.success(request, _("Created “%(name)s”. Upload files to fill it.") % {"name": knowledge_base.name})
            return HttpResponseRedirect(_detail_url(knowledge_base))
    return render(request, "knowledge/form.html", {"form": form, "knowledge_base": None})


@editors_only
@require_http_methods(["GET", "POST"])
def knowledge_base_edit(request: HttpRequest, knowledge_base_id: int) -> HttpResponse:
    knowledge_base = _knowledge_base_or_404(knowledge_base_id)
    # The form writes into its own copy: the service compares the new values with the stored ones.
    form = KnowledgeBaseForm(request.POST or None, instance=_knowledge_base_or_404(knowledge_base_id))
    needs_confirmation = False
    if request.method == "POST" and form.is_valid():
        reingests = any(name in form.changed_data for name in REINGEST_FIELDS)
        document_count = knowledge_base.documents.count()
        if reingests and document_count and not form.cleaned_data["confirm_reingest"]:
            needs_confirmation = True
        else:
            try:
                queued = knowledge_base_update(
                    knowledge_base=knowledge_base, name=form.cleaned_data["name"], **form.service_fields()
                )
            except ValidationError as exc:
                _add_service_errors(form, exc)
            else:
                if queued:
                    messages.success(
                        request,
                        ngettext(
                            "Saved. %(count)d document is being ingested again.",
                            "Saved. %(count)d documents are being ingested again.",
                            queued,
                        )
                        % {"count": queued},
                    )
                else:
                    messages.success(request, _("Saved."))
                return HttpResponseRedirect(_detail_url(knowledge_base))
    return render(
        request,
        "knowledge/form.html",
        {
            "form": form,
            "knowledge_base": knowledge_base,
            "needs_confirmation": needs_confirmation,
            "document_count": knowledge_base.documents.count(),
        },
    )


@editors_only
@require_http_methods(["GET", "POST"])
def knowledge_base_delete_view(request: HttpRequest, knowledge_base_id: int) -> HttpResponse:
    knowledge_base = _knowledge_base_or_404(knowledge_base_id)
    if request.method == "POST":
        name = knowledge_base.name
        knowledge_base_delete(knowledge_base=knowledge_base)
        messages.success(request, _("Deleted the knowledge base “%(name)s”.") % {"name": name})
        return HttpResponseRedirect(reverse("knowledge:list"))
    return render(
        request,
        "knowledge/confirm_delete.html",
        {
            "knowledge_base": knowledge_base,
            "document": None,
            "document_count": knowledge_base.documents.count(),
            "chunk_count": knowledge_base.chunks.count(),
            "cancel_url": _detail_url(knowledge_base),
        },
    )


@tenant_required
@require_GET
def knowledge_base_detail(request: HttpRequest, knowledge_base_id: int) -> HttpResponse:
    knowledge_base = _knowledge_base_or_404(knowledge_base_id)
    documents = document_list(knowledge_base=knowledge_base)
    return render(
        request,
        "knowledge/detail.html",
        {
            "knowledge_base": knowledge_base,
            "documents": documents,
            "upload_form": UploadForm(),
            "may_edit": may_edit_knowledge(request),
            "max_upload": filesizeformat(max_upload_bytes()),
            # Shown as code: they are what a file name ends with.
            "file_types": format_html_join(", ", "<code>.{}</code>", ((ext,) for ext in supported_extensions())),
            "progress_url": reverse("knowledge:progress", args=[knowledge_base.pk]),
            "outdated_count": outdated_documents(knowledge_base=knowledge_base).count(),
            "labels": {"stalled": _("Stalled")},
        },
    )


@editors_only
@require_POST
def document_upload(request: HttpRequest, knowledge_base_id: int) -> HttpResponse:
    knowledge_base = _knowledge_base_or_404(knowledge_base_id)
    form = UploadForm(request.POST, request.FILES)
    if not form.is_valid():
        for error in form.errors.get("files", []):
            messages.error(request, error)
        return HttpResponseRedirect(_detail_url(knowledge_base))
    added = 0
    limit = max_upload_bytes()
    for upload in form.cleaned_data["files"]:
        if upload.size > limit:  # refused before reading it into memory
            messages.error(
                request,
                _("“%(name)s” is %(size)s; the largest file a knowledge base accepts is %(limit)s.")
                % {"name": upload.name, "size": filesizeformat(upload.size), "limit": filesizeformat(limit)},
            )
            continue
        try:
            document_add(knowledge_base=knowledge_base, name=upload.name, content=upload.read())
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            added += 1
    if added:
        messages.success(
            request,
            ngettext(
                "Uploaded %(count)d file; its progress shows below.",
                "Uploaded %(count)d files; their progress shows below.",
                added,
            )
            % {"count": added},
        )
    return HttpResponseRedirect(_detail_url(knowledge_base))


@tenant_required
@require_GET
def document_progress_view(request: HttpRequest, knowledge_base_id: int) -> JsonResponse:
    knowledge_base = _knowledge_base_or_404(knowledge_base_id)
    return JsonResponse(document_progress(knowledge_base=knowledge_base))


@editors_only
@require_POST
def document_reingest_view(request: HttpRequest, knowledge_base_id: int, document_id: int) -> HttpResponse:
    knowledge_base = _knowledge_base_or_404(knowledge_base_id)
    document = _document_or_404(knowledge_base, document_id)
    document_reingest(document=document)
    messages.success(request, _("“%(name)s” is being ingested again.") % {"name": document.name})
    return HttpResponseRedirect(_detail_url(knowledge_base))


@editors_only
@require_POST
def knowledge_base_reingest_outdated(request: HttpRequest, knowledge_base_id: int) -> HttpResponse:
    knowledge_base = _knowledge_base_or_404(knowledge_base_id)
    count = knowledge_base_reingest(knowledge_base=knowledge_base, only_outdated=True)
    messages.success(
        request,
        ngettext(
            "%(count)d document is being ingested again with the current model.",
            "%(count)d documents are being ingested again with the current model.",
            count,
        )
        % {"count": count},
    )
    return HttpResponseRedirect(_detail_url(knowledge_base))


@editors_only
@require_http_methods(["GET", "POST"])
def document_delete_view(request: HttpRequest, knowledge_base_id: int, document_id: int) -> HttpResponse:
    knowledge_base = _knowledge_base_or_404(knowledge_base_id)
    document = _document_or_404(knowledge_base, document_id)
    if request.method == "POST":
        name = document.name
        document_delete(document=document)
        messages.success(request, _("Deleted “%(name)s” and its chunks.") % {"name": name})
        return HttpResponseRedirect(_detail_url(knowledge_base))
    return render(
        request,
        "knowledge/confirm_delete.html",
        {
            "knowledge_base": knowledge_base,
            "document": document,
            "chunk_count": document.chunks.count(),
            "cancel_url": _detail_url(knowledge_base),
        },
    )


@tenant_required
@require_GET
def knowledge_base_search(request: HttpRequest, knowledge_base_id: int) -> HttpResponse:
    knowledge_base = _knowledge_base_or_404(knowledge_base_id)
    form = SearchForm(request.GET if "q" in request.GET else None)
    hits = None
    error = ""
    if form.is_bound and form.is_valid():
        try:
            hits = search(
                knowledge_base,
                form.cleaned_data["q"],
                top_k=form.cleaned_data["top_k"],
                mode=form.cleaned_data["mode"],
            )
        except EmbedderError as exc:
            error = _("Vector search failed: %(reason)s. Keyword search still works.") % {"reason": exc}
        except NotImplementedError:
            error = _("Search is not available in this build yet.")
    results = None
    if hits is not None:
        results = [
            {
                "rank": rank,
                "hit": hit,
                "scores": _score_parts(hit.scores),
                # A record's fields are its text already; the rest (page, heading, row, key) says where it is.
                "where": [
                    (_label(WHERE_LABELS, key), value) for key, value in (hit.metadata or {}).items() if key != "record"
                ],
            }
            for rank, hit in enumerate(hits, 1)
        ]
    return render(
        request,
        "knowledge/search.html",
        {"knowledge_base": knowledge_base, "form": form, "results": results, "error": error},
    )


# The words for the retrievers' scores (knowledge.retrieval.Hit.scores) and for where a chunk sits in its document
# (the parsers' metadata keys); a key without a word here is shown as code.
SCORE_LABELS = {
    "keyword": pgettext_lazy("search score", "keyword"),
    "vector": pgettext_lazy("search score", "vector"),
    "keyword_rank": pgettext_lazy("search score", "keyword rank"),
    "vector_rank": pgettext_lazy("search score", "vector rank"),
}
WHERE_LABELS = {
    "heading": pgettext_lazy("where in a document", "heading"),
    "page": pgettext_lazy("where in a document", "page"),
    "row": pgettext_lazy("where in a document", "row"),
    "key": pgettext_lazy("where in a document", "key"),
    "index": pgettext_lazy("where in a document", "item"),
    "part": pgettext_lazy("where in a document", "part"),
}


def _label(labels: dict, key: str) -> str:
    return labels[key] if key in labels else format_html("<code>{}</code>", key)


def _score_parts(scores: dict) -> list[tuple[str, str, str]]:
    """Each retriever's score for the page (its key, its label, the value): floats to 3 decimals, ranks as they
    are."""
    return [
        (name, _label(SCORE_LABELS, name), f"{value:.3f}" if isinstance(value, float) else str(value))
        for name, value in scores.items()
    ]

"""Knowledge bases, their documents and search on the REST API: members read and search; owners and admins create,
upload (several files at once), re-ingest and delete. Every service is the knowledge pages' own. A key limited to some
agents reads only the knowledge bases those agents use; any other answers as another tenant's would (404)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.template.defaultfilters import filesizeformat
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from agents.models import AgentVersion
from api.authentication import key_access
from api.parsers import BoundedJSONParser
from api.rest import ApiViewSet, _agents_for, page_of, require_administrator
from knowledge.embedders import EmbedderError
from knowledge.models import Document, KnowledgeBase
from knowledge.parsing import max_upload_bytes
from knowledge.retrieval import search
from knowledge.selectors import document_is_stalled, knowledge_base_list_for_page
from knowledge.services import (
    KNOWLEDGE_BASE_FIELDS,
    document_add,
    document_delete,
    document_reingest,
    knowledge_base_create,
    knowledge_base_delete,
    knowledge_base_update,
)

SEARCH_MODES = ("hybrid", "vector", "keyword")


def key_knowledge_base_ids(request: Request) -> frozenset[int] | None:
    """The knowledge bases a key limited to some agents may read: those the agents it reaches use, in their draft
    (Agent.knowledge_bases) or in their published version (the ids its snapshot froze, which the turn searches).
    None for a session or a key without an agent limit: every knowledge base of the tenant. Run in the key's scope."""
    access = key_access(request)
    if access is None or not access.chosen_agent_ids:
        return None
    agent_ids = _agents_for(request).values("pk")  # the one rule of which agents a caller reaches
    drafts = KnowledgeBase.objects.filter(agents__in=agent_ids).values_list("pk", flat=True)
    newest = AgentVersion.objects.filter(agent=OuterRef("agent")).order_by("-number").values("number")[:1]
    published = AgentVersion.objects.filter(agent__in=agent_ids, number=Subquery(newest)).values_list(
        "snapshot__knowledge_base_ids", flat=True
    )
    frozen = {pk for ids in published if isinstance(ids, list) for pk in ids if isinstance(pk, int)}
    return frozenset({*drafts, *frozen})


class KnowledgeBaseSerializer(serializers.ModelSerializer):
    class Meta:
        model = KnowledgeBase
        fields = ["id", "name", "description", "embedder", "embedding_model", "chunk_size", "chunk_overlap",
                  "created_at", "updated_at"]  # fmt: skip
        read_only_fields = ["id", "created_at", "updated_at"]


class DocumentSerializer(serializers.ModelSerializer):
    stalled = serializers.SerializerMethodField()

    class Meta:
        model = Document
        fields = ["id", "name", "file_type", "size", "status", "stage", "progress", "error", "chunk_count",
                  "ingested_at", "created_at", "stalled"]  # fmt: skip
        read_only_fields = fields

    def get_stalled(self, document: Document) -> bool:
        return document_is_stalled(document)


class UploadSerializer(serializers.Serializer):
    files = serializers.ListField(child=serializers.FileField(), help_text="One or more files (multipart).")


class UploadResultSerializer(serializers.Serializer):
    documents = DocumentSerializer(many=True)
    errors = serializers.ListField(child=serializers.CharField())


class HitSerializer(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    document_id = serializers.IntegerField()
    document_name = serializers.CharField()
    position = serializers.IntegerField()
    text = serializers.CharField()
    score = serializers.FloatField()
    scores = serializers.DictField(child=serializers.FloatField())
    metadata = serializers.DictField()


class KnowledgeBaseViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin, ApiViewSet
):
    serializer_class = KnowledgeBaseSerializer
    parser_classes = [BoundedJSONParser, MultiPartParser, FormParser]

    def get_queryset(self) -> QuerySet[KnowledgeBase]:
        if (fake := self.schema_queryset()) is not None:
            return fake
        knowledge_bases = KnowledgeBase.objects.order_by("name")
        readable = key_knowledge_base_ids(self.request)
        return knowledge_bases if readable is None else knowledge_bases.filter(pk__in=readable)

    def list(self, request: Request) -> Response:
        knowledge_bases = knowledge_base_list_for_page()
        readable = key_knowledge_base_ids(request)
        if readable is not None:
            knowledge_bases = [knowledge_base for knowledge_base in knowledge_bases if knowledge_base.pk in readable]
        page = self.paginate_queryset(knowledge_bases)
        return self.get_paginated_response(KnowledgeBaseSerializer(page, many=True).data)

    def create(self, request: Request) -> Response:
        """A new knowledge base (owners and admins)."""
        require_administrator(request)
        data = KnowledgeBaseSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = {k: v for k, v in data.validated_data.items() if k in KNOWLEDGE_BASE_FIELDS and k != "name"}
        try:
            knowledge_base = knowledge_base_create(tenant=request.tenant, name=data.validated_data["name"], **fields)
        except DjangoValidationError as error:
            raise exceptions.ValidationError(error.message_dict) from None
        return Response(KnowledgeBaseSerializer(knowledge_base).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=KnowledgeBaseSerializer, responses={200: KnowledgeBaseSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Change it; a new embedder or chunking re-ingests every document (their old chunks serve until then)."""
        knowledge_base = self.get_object()
        require_administrator(request)
        data = KnowledgeBaseSerializer(knowledge_base, data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        try:
            knowledge_base_update(knowledge_base=knowledge_base, **data.validated_data)
        except DjangoValidationError as error:
            raise exceptions.ValidationError(error.message_dict) from None
        return Response(KnowledgeBaseSerializer(knowledge_base).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete it with its documents and chunks (agents stop finding them at once)."""
        knowledge_base = self.get_object()
        require_administrator(request)
        knowledge_base_delete(knowledge_base=knowledge_base)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(methods=["GET"], responses={200: page_of(DocumentSerializer)})
    @extend_schema(methods=["POST"], request={"multipart/form-data": UploadSerializer},
                   responses={201: UploadResultSerializer})  # fmt: skip
    @action(detail=True, methods=["get", "post"])
    def documents(self, request: Request, pk: str | None = None) -> Response:
        """GET: the documents with their ingestion status. POST: upload files (each ingested in the background;
        a file that cannot be taken is named in `errors`, the others are kept)."""
        knowledge_base = self.get_object()
        if request.method == "GET":
            documents = Document.objects.filter(knowledge_base=knowledge_base).order_by("-created_at", "-id")
            page = self.paginate_queryset(documents)
            return self.get_paginated_response(DocumentSerializer(page, many=True).data)
        require_administrator(request)
        uploads = request.FILES.getlist("files")
        if not uploads:
            raise exceptions.ValidationError({"files": [_("Choose at least one file.")]})
        documents, errors = [], []
        limit = max_upload_bytes()
        for upload in uploads:
            if upload.size > limit:  # refused before it is read into memory
                errors.append(
                    _("“%(name)s” is %(size)s; the largest file a knowledge base accepts is %(limit)s.")
                    % {"name": upload.name, "size": filesizeformat(upload.size), "limit": filesizeformat(limit)}
                )
                continue
            try:
                with transaction.atomic():
                    documents.append(
                        document_add(knowledge_base=knowledge_base, name=upload.name, content=upload.read())
                    )
            except DjangoValidationError as error:
                errors.append(" ".join(error.messages))
        code = status.HTTP_201_CREATED if documents else status.HTTP_400_BAD_REQUEST
        body: dict[str, Any] = {"documents": DocumentSerializer(documents, many=True).data, "errors": errors}
        if not documents:
            body = {"error": {"code": "validation_error", "message": " ".join(errors), "fields": {"files": errors}}}
        return Response(body, status=code)

    def _document(self, knowledge_base: KnowledgeBase, document_id: str) -> Document:
        document = Document.objects.filter(knowledge_base=knowledge_base, pk=int(document_id)).first()
        if document is None:
            raise exceptions.NotFound(_("No such document in this knowledge base."))
        return document

    @extend_schema(methods=["GET"], responses={200: DocumentSerializer}, operation_id="knowledge_bases_document_read")
    @extend_schema(methods=["DELETE"], responses={204: None}, operation_id="knowledge_bases_document_delete")
    @action(detail=True, methods=["get", "delete"], url_path=r"documents/(?P<document_id>\d+)")
    def document(self, request: Request, pk: str | None = None, document_id: str = "") -> Response:
        """GET: one document's status and progress. DELETE: delete it and its chunks."""
        document = self._document(self.get_object(), document_id)
        if request.method == "GET":
            return Response(DocumentSerializer(document).data)
        require_administrator(request)
        document_delete(document=document)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={202: DocumentSerializer})
    @action(detail=True, methods=["post"], url_path=r"documents/(?P<document_id>\d+)/reingest")
    def reingest(self, request: Request, pk: str | None = None, document_id: str = "") -> Response:
        """Ingest the document again (e.g. after a failure)."""
        document = self._document(self.get_object(), document_id)
        require_administrator(request)
        return Response(DocumentSerializer(document_reingest(document=document)).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        parameters=[
            OpenApiParameter("q", str, required=True, description="What to look for."),
            OpenApiParameter("mode", str, enum=[*SEARCH_MODES], description="hybrid (default), vector or keyword"),
            OpenApiParameter("top_k", int, description="How many chunks (1-50, default 5)."),
        ],
        responses={200: HitSerializer(many=True)},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def search(self, request: Request, pk: str | None = None) -> Response:
        """The best chunks for a query, with their scores and sources."""
        knowledge_base = self.get_object()
        query = (request.query_params.get("q") or "").strip()
        mode = request.query_params.get("mode") or "hybrid"
        top_k = request.query_params.get("top_k") or "5"
        problems = {}
        if not query:
            problems["q"] = [_("Say what to look for.")]
        if mode not in SEARCH_MODES:
            problems["mode"] = [_("Choose hybrid, vector or keyword.")]
        if not top_k.isdigit() or not 1 <= int(top_k) <= 50:
            problems["top_k"] = [_("Choose a number from 1 to 50.")]
        if problems:
            raise exceptions.ValidationError(problems)
        try:
            hits = search(knowledge_base, query, top_k=int(top_k), mode=mode)
        except EmbedderError as error:
            message = _("Vector search failed: %(reason)s. Keyword search still works.") % {"reason": error}
            return Response({"error": {"code": "embedder_failed", "message": message}}, status=502)
        return Response(HitSerializer(hits, many=True).data)

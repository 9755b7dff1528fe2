"""Files for conversations through the REST API (docs/attachments.md): upload one (multipart, optionally into a
conversation), read what the platform made of it, fetch its bytes; then send it with a message by id
(POST /api/v1/conversations/{id}/messages/ with "attachments": [ids], or a `file_id` content part on /v1).

Bytes are served only to those memory.attachments.attachment_readable allows (the uploader; whoever may read its
conversation) and, for a key limited to some agents, only a file of those agents' conversations: anyone else gets
the same 404 as for an id that does not exist. There is no public URL: every fetch is authenticated."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from api.authentication import key_access
from api.keys import caller_conversation
from api.models import KeyScope
from api.parsers import BoundedJSONParser
from api.refusals import error_response
from api.rest import ApiViewSet
from core.conf import setting
from memory.attachments import (
    AttachmentRefused,
    Upload,
    attachment_info,
    attachment_readable,
    attachment_upload,
    file_response,
)
from memory.models import Attachment, AttachmentKind, Conversation


# A file as the API shows it (never the text read from it, never where it is stored).
class AttachmentSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=AttachmentKind.choices)
    content_type = serializers.CharField(help_text="Sniffed from the bytes, not from the name.")
    size = serializers.IntegerField(help_text="Bytes stored (an image re-encoded without its metadata).")
    pages = serializers.IntegerField()
    width = serializers.IntegerField()
    height = serializers.IntegerField()


class AttachmentUploadSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="The file: an image (PNG, JPEG, WebP, GIF...) or a document (PDF, DOCX...).")
    conversation = serializers.IntegerField(
        required=False, help_text="The conversation it is for (one of yours); without it, it is bound when sent."
    )


def readable_attachment(request: Request, attachment_id: int) -> Attachment:
    """The attachment `attachment_id` if this caller may read it; NotFound otherwise (missing, another member's,
    another tenant's, or a conversation outside a limited key's agents: one answer)."""
    attachment = Attachment.objects.select_related("conversation").filter(pk=attachment_id).first()
    readable = attachment is not None and attachment_readable(
        user=request.user, membership=request.membership, attachment=attachment
    )
    access = key_access(request)
    if readable and access is not None and attachment.conversation is not None:
        readable = access.agents().filter(pk=attachment.conversation.agent_id).exists()
    if not readable:
        raise exceptions.NotFound(_("No such file."))
    return attachment


class AttachmentViewSet(mixins.RetrieveModelMixin, ApiViewSet):
    """Files for conversations: upload (multipart), then send with a message by id; read its description and
    bytes (only those who may read its conversation)."""

    serializer_class = AttachmentSerializer
    # The upload is multipart; a JSON body is read too, to answer what it lacks (a 400) rather than a 415.
    parser_classes = [MultiPartParser, BoundedJSONParser]
    write_scopes = {"create": KeyScope.CHAT}
    agent_limited_actions = frozenset(write_scopes)

    def get_object(self) -> Attachment:
        return readable_attachment(self.request, int(self.kwargs["pk"]))

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """What was stored: its name, kind, sniffed type, size, pages or pixels."""
        return Response(attachment_info(self.get_object()))

    def _conversation(self, request: Request, conversation_id: int | None) -> Conversation | None:
        if conversation_id is None:
            return None
        try:
            return caller_conversation(
                conversation_id=conversation_id, user=request.user, membership=request.membership,
                access=key_access(request),
            )  # fmt: skip
        except Conversation.DoesNotExist:
            raise exceptions.NotFound(_("No such conversation.")) from None

    @extend_schema(
        request={"multipart/form-data": AttachmentUploadSerializer},
        responses={
            201: AttachmentSerializer,
            400: OpenApiResponse(description="The file is refused (nothing stored): `code` says why."),
        },
    )
    def create(self, request: Request) -> Response:
        """Upload a file. Its type is read from its bytes; an image is re-encoded without its metadata; a document's
        text is read. Refused (nothing stored): a program, an archive bomb, a broken file, one over the size or
        pixel limit, more files than a conversation holds."""
        data = AttachmentUploadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        conversation = self._conversation(request, data.validated_data.get("conversation"))
        sent = data.validated_data["file"]
        # At most one byte past the limit is read: the file's reader refuses it as too large from that.
        upload = Upload(name=sent.name or "", data=sent.read(int(setting("ATTACHMENT_MAX_BYTES")) + 1))
        try:
            attachment = attachment_upload(user=request.user, upload=upload, conversation=conversation)
        except AttachmentRefused as refused:
            return error_response(refused.status, str(refused.code), refused.message)
        return Response(attachment_info(attachment), status=status.HTTP_201_CREATED)

    # The sniffed type of the file (image/png, application/pdf, text/plain...): any media type.
    @extend_schema(responses={(200, "*/*"): OpenApiTypes.BINARY})
    @action(detail=True, methods=["get"])
    def content(self, request: Request, pk: str | None = None) -> FileResponse:
        """The file's bytes: an image inline, a document as a download."""
        return file_response(self.get_object())

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # The bytes answer whatever a client accepts (an <img> asks for image/*, a download for the document's type);
        # errors are JSON all the same.
        return super().perform_content_negotiation(request, force=True)

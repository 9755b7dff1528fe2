"""Files on the chat page (docs/attachments.md): the attach button's upload (POST /chat/attachments/, into one's
own conversation) and the page route that serves a file's bytes (GET /chat/attachments/<id>/) to a session user
memory.attachments.attachment_readable allows; anyone else, another tenant's member included, gets the same 404 as
for an id that does not exist. The widget's door (widget.views) serves its visitors through the same helpers."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse, Http404, HttpRequest, JsonResponse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from core.conf import setting
from memory.attachments import (
    AttachmentRefused,
    Upload,
    attachment_info,
    attachment_readable,
    attachment_upload,
    file_response,
)
from memory.models import Attachment, Conversation
from memory.selectors import access_conversation
from tenants.decorators import tenant_required


def error(status: int, code: str, message: str) -> JsonResponse:
    """A page script's error answer: {"error": {"code", "message"}}, the message in the page's language."""
    body = {"error": {"code": code, "message": message}}
    return JsonResponse(body, status=status, json_dumps_params={"ensure_ascii": False})


def upload_response(*, user: Any, request: HttpRequest, conversation: Conversation | None) -> JsonResponse:
    """Store the request's `file` for `user` (into `conversation` when known) and answer its description, or the
    refusal that says what is wrong with it (nothing is stored then)."""
    sent = request.FILES.get("file")
    if sent is None:
        return error(400, "no_file", _("Choose a file to attach."))
    # At most one byte past the limit is read: the file's reader refuses it as too large from that.
    upload = Upload(name=sent.name or "", data=sent.read(int(setting("ATTACHMENT_MAX_BYTES")) + 1))
    try:
        attachment = attachment_upload(user=user, upload=upload, conversation=conversation)
    except AttachmentRefused as refused:
        return error(refused.status, str(refused.code), refused.message)
    return JsonResponse(attachment_info(attachment), status=201, json_dumps_params={"ensure_ascii": False})


@tenant_required
@require_POST
def upload(request: HttpRequest) -> JsonResponse:
    """The attach button: a file for the user's own conversation `conversation` (a form field), sent with their
    next message by id. Another's conversation is a 404."""
    try:
        conversation = access_conversation(
            conversation_id=int(request.POST.get("conversation", "")), user=request.user, membership=request.membership
        )
    except (ValueError, Conversation.DoesNotExist):
        raise Http404("No such conversation.") from None
    if conversation.user_id != request.user.pk or conversation.parent_id is not None:
        raise Http404("No such conversation.")
    return upload_response(user=request.user, request=request, conversation=conversation)


@tenant_required
@require_GET
def content(request: HttpRequest, attachment_id: int) -> FileResponse:
    """A file's bytes, for whoever may read it (its uploader, whoever may read its conversation)."""
    attachment = Attachment.objects.select_related("conversation").filter(pk=attachment_id).first()
    if attachment is None or not attachment_readable(
        user=request.user, membership=request.membership, attachment=attachment
    ):
        raise Http404("No such file.")
    return file_response(attachment)

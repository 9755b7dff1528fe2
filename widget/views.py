"""The widget's pages: /embed.js (the snippet's script), the framed page /embed/<token>/ (only for the embed's
allowed origins), the visitor's chat /embed/<token>/chat/ and feedback on its replies (docs/embed.md).

The visitor's credentials (the frame's signed ticket and the visitor's id) travel only in POST bodies and the
socket's first frame, never in a URL, which access logs and browser histories keep. A page load makes nothing: the
visitor and their conversation are made with their first message (engine.admission).

A refused request gets an empty 403: nothing of the agent, its tenant or the platform. Every page of a live embed
carries `Content-Security-Policy: frame-ancestors <its origin>` instead of the site's 'none'."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import render
from django.templatetags.static import static
from django.utils.translation import gettext as _
from django.utils.translation import override
from django.views.decorators.cache import never_cache
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from agents.config import agent_config
from agents.limits import message_limit
from chat import selectors
from chat.attachments import error, upload_response
from chat.views import attachment_config, feedback_body, page_labels, rate_reply
from engine.admission import Caller, CallerKind, Refusal, visitor_account
from memory.attachments import AttachmentRefused, AttachmentRefusedCode, attachment_readable, file_response
from memory.models import Attachment, Conversation, ConversationSource, Message
from tenants.scope import tenant_scope
from widget import visitors
from widget.models import EmbedToken


def _framed(response: HttpResponse, origins: list[str]) -> HttpResponse:
    """May be framed by `origins` only (django-csp reads _csp_replace)."""
    response._csp_replace = {"frame-ancestors": origins}  # type: ignore[attr-defined]
    return response


def _refused() -> HttpResponse:
    return HttpResponseForbidden(b"", content_type="text/plain")


@require_GET
def embed_script(request: HttpRequest) -> HttpResponse:
    """The snippet's script: a small redirect to the static file, so the snippet's URL never changes."""
    response = HttpResponse(status=302)
    response["Location"] = static("widget/embed.js")
    response["Cache-Control"] = "public, max-age=300"
    return response


@never_cache
@xframe_options_exempt
@require_GET
def frame(request: HttpRequest, token: str) -> HttpResponse:
    """The page the bubble opens: refused unless the page framing it (Referer) is an allowed origin. Its
    static/widget/boot.js posts the visitor's id (kept in this frame's storage) and a signed ticket to the chat page."""
    embed = visitors.token_lookup(token)
    origin = visitors.allowed_origin(embed, request.headers) if embed is not None else None
    if origin is None:
        return _refused()
    lang = visitors.language(request.GET.get("lang"))
    with override(lang):
        response = render(
            request,
            "widget/frame.html",
            {
                "lang": lang,
                "boot": {"chatUrl": f"/embed/{embed.token}/chat/", "ticket": visitors.ticket_make(embed, origin, lang)},
            },
        )
    return _framed(response, [origin])


@dataclass(frozen=True)
class _Visitor:
    """What a request's body proved: its live embed, its ticket (the raw value too), the visitor's id, and their
    conversation (None before their first message)."""

    embed: EmbedToken
    ticket: visitors.Ticket
    ticket_value: str
    visitor_id: str
    conversation: Conversation | None


def _visitor(token: str, values: Any) -> _Visitor | None:
    """The visitor a POST body names (`ticket`, `visitor`); None: refused. Reads only: nothing is made before the
    visitor's first message (the engine makes the visitor and their conversation with it)."""
    embed = visitors.token_lookup(token)
    ticket_value = str(values.get("ticket") or "")
    ticket = visitors.ticket_read(embed, ticket_value) if embed is not None else None
    visitor_id = str(values.get("visitor") or "")
    if ticket is None or not visitors.VISITOR_ID.match(visitor_id):
        return None
    with tenant_scope(embed.tenant):
        conversation = visitors.visitor_conversation(embed, visitor_id)
    return _Visitor(embed, ticket, ticket_value, visitor_id, conversation)


def _chat_config(found: _Visitor) -> dict[str, Any]:
    """The chat page's chat.js configuration. The ticket and the visitor's id go in the socket's first frame
    (`socketAuth`) and in feedback's body, never in a URL: URLs end up in access logs."""
    embed, conversation = found.embed, found.conversation
    if conversation is not None:
        last_seq = selectors.stream_resume_seq(conversation_id=conversation.pk)
        limit = selectors.conversation_message_limit(conversation=conversation)
    else:  # no conversation before the first message: the published version's limit
        last_seq = 0
        limit = message_limit(agent_config(agent=embed.agent, version=embed.agent.published_version()))
    credentials = {"ticket": found.ticket_value, "visitor": found.visitor_id}
    return {
        "wsPath": f"/ws/embed/{embed.token}/",
        "socketAuth": {"type": "visitor", **credentials},
        "lastSeq": last_seq,
        "maxChars": limit.chars,
        "feedbackUrl": f"/embed/{embed.token}/messages/0/feedback/",
        "feedbackFields": credentials,
        # Each reply's tokens are the site owner's business: shown to visitors only if the embed says so.
        "showUsage": embed.show_token_usage,
        # Files: the attach button only where the embed allows them; a file's bytes are fetched with the
        # credentials in a POST body (the visitor has no session).
        **attachment_config(
            upload_url=f"/embed/{embed.token}/attachments/" if embed.files_allowed else "",
            file_url=f"/embed/{embed.token}/attachments/0/",
            upload_fields=credentials,
            post=True,
            max_file_bytes=embed.max_file_bytes(),
        ),
    }


@csrf_exempt  # the visitor has no session: the signed ticket and the visitor's own id in the body are the credentials
@never_cache
@xframe_options_exempt
@require_POST
def chat(request: HttpRequest, token: str) -> HttpResponse:
    """The visitor's chat, posted to by static/widget/boot.js: their conversation's history if they have one, then
    new turns over the widget's socket (static/js/chat.js). A GET is refused: no credential ever rides in a URL."""
    found = _visitor(token, request.POST)
    if found is None:
        return _refused()
    embed, conversation = found.embed, found.conversation
    with override(found.ticket.lang), tenant_scope(embed.tenant):
        context = {
            "lang": found.ticket.lang,
            "agent_name": embed.agent.name,
            # The visitor is the conversation's user: their stored ratings show on the replies.
            "history": (
                selectors.chat_history(conversation=conversation, viewer_id=conversation.user_id)
                if conversation is not None
                else None
            ),
            "show_usage": embed.show_token_usage,
            "files_allowed": embed.files_allowed,
            "chat_config": _chat_config(found),
            "chat_labels": page_labels(embed.tenant),
        }
        response = render(request, "widget/chat.html", context)
    return _framed(response, [found.ticket.origin])


@csrf_exempt  # the visitor has no session: the signed ticket and the visitor's own id are the credentials
@require_POST
def feedback(request: HttpRequest, token: str, message_id: int) -> JsonResponse:
    """Rate a reply of the visitor's own conversation through this embed; any other message is a 404."""
    data = feedback_body(request)
    found = _visitor(token, data)
    if found is None:
        return JsonResponse({}, status=403)
    embed, conversation = found.embed, found.conversation
    if conversation is None:  # no message yet: nothing of theirs to rate
        raise Http404("No such message.")
    with override(found.ticket.lang), tenant_scope(embed.tenant):
        message = Message.objects.filter(pk=message_id, conversation=conversation).first()
        if message is None:
            raise Http404("No such message.")
        return rate_reply(message=message, user=conversation.user, data=data, source=ConversationSource.WIDGET)


def _too_large(embed: EmbedToken, request: HttpRequest) -> JsonResponse | None:
    """The embed's own size limit, before the file is read: the same refusal as the platform's limit."""
    sent = request.FILES.get("file")
    if sent is None or sent.size <= embed.max_file_bytes():
        return None
    refused = AttachmentRefused(
        AttachmentRefusedCode.TOO_LARGE,
        _("“%(name)s” is larger than %(max)s MB, the largest file this assistant takes: send a smaller one.")
        % {"name": sent.name, "max": embed.max_file_bytes() // (1024 * 1024)},
    )
    return error(refused.status, str(refused.code), refused.message)


@csrf_exempt  # the visitor has no session: the signed ticket and the visitor's own id in the body are the credentials
@require_POST
def upload(request: HttpRequest, token: str) -> JsonResponse:
    """A visitor's file, through an embed that allows files, stored under the visitor's own account (made now if
    this is their first upload, within the new-visitor rate) and sent with their next message by id."""
    found = _visitor(token, request.POST)
    if found is None:
        return JsonResponse({}, status=403)
    embed = found.embed
    with override(found.ticket.lang), tenant_scope(embed.tenant):
        if not embed.files_allowed:
            return error(403, "attachments_not_allowed", _("This assistant does not take files."))
        if (refused := _too_large(embed, request)) is not None:
            return refused
        visitor = visitors.visitor_pass(embed, found.visitor_id, address=request.META.get("REMOTE_ADDR", ""))
        caller = Caller(tenant=embed.tenant, source=ConversationSource.WIDGET, kind=CallerKind.VISITOR, visitor=visitor)
        user = visitor_account(caller)
        if isinstance(user, Refusal):  # a new visitor over the new-visitor rate, as their first message would be
            refused = error(user.status, str(user.code), user.message)
            if user.retry_after:
                refused["Retry-After"] = str(user.retry_after)
            return refused
        return upload_response(user=user, request=request, conversation=found.conversation)


@csrf_exempt  # the visitor has no session: the signed ticket and the visitor's own id in the body are the credentials
@never_cache
@require_POST
def attachment(request: HttpRequest, token: str, attachment_id: int) -> HttpResponse:
    """A file's bytes for the visitor who sent it (a POST: the credentials never ride in a URL); any other file is
    a 404, as a missing one."""
    found = _visitor(token, request.POST)
    if found is None:
        return _refused()
    with tenant_scope(found.embed.tenant):
        user = visitors.visitor_user(found.embed, found.visitor_id)
        file = Attachment.objects.select_related("conversation").filter(pk=attachment_id).first()
        if user is None or file is None or not attachment_readable(user=user, membership=None, attachment=file):
            raise Http404("No such file.")
        return file_response(file)

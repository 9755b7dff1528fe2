"""The widget's pages: /embed.js (the snippet's script), the framed page /embed/<token>/ (only for the embed's
allowed origins), the visitor's chat /embed/<token>/chat/ and feedback on its replies (docs/embed.md).

A refused request gets an empty 403: nothing of the agent, its tenant or the platform. Every page of a live embed
carries `Content-Security-Policy: frame-ancestors <its origin>` instead of the site's 'none'."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import render
from django.templatetags.static import static
from django.utils.translation import override
from django.views.decorators.cache import never_cache
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from chat import selectors
from chat.views import feedback_body, page_labels, rate_reply
from memory.models import ConversationSource, Message
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
    """The page the bubble opens: refused unless the page framing it (Referer) is an allowed origin. It hands the
    visitor's id (kept in this frame's storage by static/widget/boot.js) and a signed ticket to the chat page."""
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


def _visitor(request: HttpRequest, token: str, values: Any) -> tuple[EmbedToken, visitors.Ticket, Any] | None:
    """The embed, the ticket and the visitor's conversation a request names; None: refused."""
    embed = visitors.token_lookup(token)
    ticket = visitors.ticket_read(embed, values.get("ticket")) if embed is not None else None
    if ticket is None:
        return None
    with tenant_scope(embed.tenant):
        conversation = visitors.visitor_conversation(embed, str(values.get("visitor") or ""))
    if conversation is None:
        return None
    return embed, ticket, conversation


@never_cache
@xframe_options_exempt
@require_GET
def chat(request: HttpRequest, token: str) -> HttpResponse:
    """The visitor's conversation: its history, then new turns over the widget's socket (static/js/chat.js)."""
    found = _visitor(request, token, request.GET)
    if found is None:
        return _refused()
    embed, ticket, conversation = found
    visitor = request.GET["visitor"]
    with override(ticket.lang), tenant_scope(embed.tenant):
        query = f"?ticket={request.GET['ticket']}&visitor={visitor}"
        context = {
            "lang": ticket.lang,
            "agent_name": embed.agent.name,
            "history": selectors.chat_history(conversation=conversation),
            "chat_config": {
                "wsPath": f"/ws/embed/{embed.token}/{query}",
                "lastSeq": selectors.stream_resume_seq(conversation_id=conversation.pk),
                "maxChars": selectors.conversation_message_limit(conversation=conversation).chars,
                "feedbackUrl": f"/embed/{embed.token}/messages/0/feedback/",
                "feedbackFields": {"ticket": request.GET["ticket"], "visitor": visitor},
            },
            "chat_labels": page_labels(embed.tenant),
        }
        response = render(request, "widget/chat.html", context)
    return _framed(response, [ticket.origin])


@csrf_exempt  # the visitor has no session: the signed ticket and the visitor's own id are the credentials
@require_POST
def feedback(request: HttpRequest, token: str, message_id: int) -> JsonResponse:
    """Rate a reply of the visitor's own conversation through this embed; any other message is a 404."""
    data = feedback_body(request)
    found = _visitor(request, token, data)
    if found is None:
        return JsonResponse({}, status=403)
    embed, ticket, conversation = found
    with override(ticket.lang), tenant_scope(embed.tenant):
        message = Message.objects.filter(pk=message_id, conversation=conversation).first()
        if message is None:
            raise Http404("No such message.")
        return rate_reply(message=message, user=conversation.user, data=data, source=ConversationSource.WIDGET)

"""The chat page: the conversation list, starting a conversation, one conversation with its history."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from agents import progress
from agents.models import Agent
from agents.selectors import agent_get
from agents.services import conversation_start as start_conversation
from agents.tools import tool_labels
from agents.workflows.schema import step_type_labels
from chat import selectors
from core.bounded import loads_json, unstorable_at, unstorable_message
from core.conf import setting
from memory.feedback import feedback_record, parse_rating
from memory.models import Conversation, ConversationSource, Message
from memory.selectors import access_conversation
from tenants.decorators import may_administer, tenant_required
from tenants.models import Tenant


def page_labels(tenant: Tenant) -> dict[str, object]:
    """The page script's words, in the active language (static/js/chat.js fills %(name)s placeholders)."""
    return {
        "tokens": _("Tokens: %(prompt)s prompt + %(completion)s completion"),
        # A progress line names the tool (or the workflow step) by its label, never by its identifier.
        "toolStatus": progress.tool_status_labels(),
        "stepLine": progress.workflow_step_line_labels(),
        "toolNames": tool_labels(tenant=tenant),  # the tenant's MCP tools too
        "stepTypes": step_type_labels(),
        "step": _("Step %(index)s"),
        "stepStatus": progress.step_status_labels(),
        "incomplete": _("This reply is incomplete."),
        "failed": _("This reply failed."),
        # A reply the agent's longest reply (max_tokens) cut: done's finish_reason "length" (templates/chat/_cut.html).
        "cutShort": _("This reply was cut off here: it reached the agent's “Longest reply (tokens)” limit."),
        "stopping": _("Stopping…"),
        "connecting": _("Connecting…"),
        "reconnecting": _("Connection lost, reconnecting…"),
        "thinking": _("Writing a reply…"),
        "summarised": _("Older messages were summarised to fit the context window."),
        "tooLong": _("%(count)s / %(max)s characters: shorten the message to send it."),
        "windowed": _("Older messages were dropped by the sliding window (%(saved)s tokens saved)."),
        "memories": _("Memories used (%(count)s)"),
        "memoryKinds": {"event": _("event"), "memory": _("memory"), "turn": _("earlier turn")},
        # The rating buttons and comment form are the page's own (templates/chat/_feedback.html): chat.js clones them.
        "thanks": _("Thanks for your feedback."),
        "feedbackFailed": _("Your feedback was not saved. Try again."),
        **attachment_labels(),
    }


def attachment_labels() -> dict[str, str]:
    """static/js/attachments.js's words, in the active language."""
    return {
        "attach": _("Attach files"),
        "dropHere": _("Drop files here to attach them"),
        "uploading": _("Uploading… %(percent)s"),
        "reading": _("Reading…"),
        "remove": _("Remove %(name)s"),
        "uploadFailed": _("%(name)s was not attached: %(reason)s"),
        "uploadBroken": _("the upload was interrupted. Try again."),
        "tooManyFiles": _("A message may carry at most %(max)s files."),
        "fileTooLarge": _("%(name)s is larger than %(max)s MB: choose a smaller file."),
        "pages": _("%(pages)s pages"),
        "waitUploads": _("Wait until the files are attached."),
    }


def attachment_config(
    *, upload_url: str, file_url: str, upload_fields: dict[str, Any], post: bool = False, max_file_bytes: int = 0
) -> dict[str, Any]:
    """What static/js/attachments.js needs: where to upload (empty: no attach button), the URL of a file's bytes
    (".../0/" stands for the id; `post`: fetched with the upload fields in a POST body, as the widget's visitor has
    no session), the fields every upload carries, and the limits it tells the user before uploading."""
    return {
        "attachUrl": upload_url,
        "attachmentUrl": file_url,
        "attachmentPost": post,
        "uploadFields": upload_fields,
        "maxFileBytes": max_file_bytes or int(setting("ATTACHMENT_MAX_BYTES")),
        "maxFiles": int(setting("ATTACHMENTS_PER_MESSAGE")),
    }


@login_required
@require_GET
def conversation_list(request: HttpRequest) -> HttpResponse:
    """The user's conversations in the active tenant, and the form that starts a new one."""
    if request.tenant is None:
        return render(request, "chat/list.html", {"no_tenant": True})
    administrator = may_administer(request)
    return render(
        request,
        "chat/list.html",
        {
            "conversations": selectors.conversation_list(user=request.user, with_tests=administrator),
            "agents": selectors.agents_for_new_conversation(),
            "agents_url": reverse("agents:list"),
            "can_administer": administrator,
        },
    )


@tenant_required
@require_POST
def conversation_start(request: HttpRequest) -> HttpResponse:
    """Start a conversation with one of the tenant's active, published agents (administrators try a draft from its
    agent page, in a test conversation); another tenant's agent is a 404."""
    try:
        agent = agent_get(agent_id=int(request.POST.get("agent", "")))
    except (ValueError, Agent.DoesNotExist):
        raise Http404("No such agent.") from None
    if not agent.active or agent.published_version() is None:
        raise Http404("No such agent.")
    conversation = start_conversation(agent=agent, user=request.user)
    return redirect("chat:conversation", conversation_id=conversation.pk)


@tenant_required
@require_GET
def conversation_detail(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """One conversation: its history rendered here, new turns over the websocket (static/js/chat.js)."""
    try:
        conversation = access_conversation(
            conversation_id=conversation_id, user=request.user, membership=request.membership
        )
    except Conversation.DoesNotExist:
        raise Http404("No such conversation.") from None
    context = getattr(conversation, "context", None)
    # A plan step's internal conversation is read-only: typing there would run the step agent outside its plan.
    own = conversation.user_id == request.user.pk and conversation.parent_id is None
    # Only one's own replies are rated here, so only then does the page show (and need) the viewer's ratings.
    history = selectors.chat_history(conversation=conversation, viewer_id=request.user.pk if own else None)
    return render(
        request,
        "chat/conversation.html",
        {
            "conversation": conversation,
            "history": history,
            "strategy_label": context.get_strategy_display() if context is not None else "",
            "strategy": context.strategy if context is not None else "",
            "own": own,
            "can_administer": may_administer(request),
            "chat_config": {
                "wsPath": f"/ws/chat/{conversation.pk}/",
                "lastSeq": selectors.stream_resume_seq(conversation_id=conversation.pk),
                "maxChars": selectors.conversation_message_limit(conversation=conversation).chars,
                # Feedback on replies: only on one's own conversation (static/js/chat.js posts to it).
                "feedbackUrl": reverse("chat:feedback", args=[0]) if own else "",
                "csrfToken": get_token(request) if own else "",
                **attachment_config(
                    upload_url=reverse("chat:attachment-upload") if own else "",
                    file_url=reverse("chat:attachment", args=[0]),
                    upload_fields={"conversation": conversation.pk},
                ),
            },
            "chat_labels": page_labels(request.tenant),
            "plan": selectors.conversation_plan(conversation=conversation),
        },
    )


def feedback_body(request: HttpRequest) -> dict[str, object]:
    """A feedback POST's fields: a JSON object, else the form. A body that is not JSON (or nests too deep to read)
    has no fields."""
    if request.content_type == "application/json":
        try:
            data = loads_json(request.body or b"{}")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}
    return request.POST.dict()


@tenant_required
@require_POST
def message_feedback(request: HttpRequest, message_id: int) -> JsonResponse:
    """Rate a reply of one's own conversation: {"rating": "up"|"down"|1|-1, "comment": "..."}; rating again
    replaces the earlier rating. Another tenant's or another member's message is a 404."""
    message = Message.objects.filter(pk=message_id, conversation__user_id=request.user.pk).first()
    if message is None or message.conversation.parent_id is not None:
        raise Http404("No such message.")
    return rate_reply(message=message, user=request.user, data=feedback_body(request), source=ConversationSource.CHAT)


def rate_reply(*, message: Message, user: Any, data: dict, source: str) -> JsonResponse:
    """Record `user`'s rating of `message` from a page's posted `data` ({"rating", "comment"}) and answer the page:
    the chat page's and the widget's feedback views both end here. Text the database cannot store (a NUL, a lone
    surrogate) is refused before anything is."""
    if (where := unstorable_at(data)) is not None:
        return JsonResponse({"error": unstorable_message(where)}, status=400)
    rating = parse_rating(data.get("rating"))
    if rating is None:
        return JsonResponse({"error": _("Rate with 1 (thumbs up) or -1 (thumbs down).")}, status=400)
    try:
        feedback = feedback_record(
            message=message, user=user, rating=rating, comment=str(data.get("comment") or ""), source=source
        )
    except ValidationError as error:
        return JsonResponse({"error": " ".join(error.messages)}, status=400)
    return JsonResponse({"message_id": message.pk, "rating": feedback.rating, "comment": feedback.comment})

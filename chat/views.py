"""The chat page: the conversation list, starting a conversation, one conversation with its history."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from agents.models import Agent
from agents.selectors import agent_get
from chat import selectors
from memory.models import Conversation
from memory.services import conversation_start as start_conversation


def _require_tenant(request: HttpRequest) -> None:
    if getattr(request, "tenant", None) is None:
        raise Http404("No active tenant.")


def _can_administer(request: HttpRequest) -> bool:
    membership = getattr(request, "membership", None)
    return bool(membership is not None and membership.can_administer)


def _agents_url() -> str:
    try:
        return reverse("agents:list")
    except NoReverseMatch:
        return ""


def _labels() -> dict[str, object]:
    """The page script's words, in the active language (static/js/chat.js fills %(name)s placeholders)."""
    return {
        "tokens": _("Tokens: %(prompt)s prompt + %(completion)s completion"),
        "toolStarted": _("Tool %(name)s running…"),
        "toolFinished": _("Tool %(name)s finished"),
        "toolFailed": _("Tool %(name)s failed"),
        "toolAsked": _("Tool %(name)s asked you a question"),
        "step": _("Step %(index)s"),
        "stepStatus": {
            "not_started": _("not started"),
            "in_progress": _("in progress"),
            "completed": _("completed"),
            "interrupted": _("interrupted"),
            "failed": _("failed"),
        },
        "incomplete": _("This reply is incomplete."),
        "failed": _("This reply failed."),
        "stopping": _("Stopping…"),
        "connecting": _("Connecting…"),
        "reconnecting": _("Connection lost, reconnecting…"),
        "thinking": _("Writing a reply…"),
        "summarised": _("Older messages were summarised to fit the context window."),
        "windowed": _("Older messages were dropped by the sliding window (%(saved)s tokens saved)."),
    }


@login_required
@require_GET
def conversation_list(request: HttpRequest) -> HttpResponse:
    """The user's conversations in the active tenant, and the form that starts a new one."""
    if request.tenant is None:
        return render(request, "chat/list.html", {"no_tenant": True})
    return render(
        request,
        "chat/list.html",
        {
            "conversations": selectors.conversation_list(user=request.user),
            "agents": selectors.agents_for_new_conversation(),
            "agents_url": _agents_url(),
            "can_administer": _can_administer(request),
        },
    )


@login_required
@require_POST
def conversation_start(request: HttpRequest) -> HttpResponse:
    """Start a conversation with one of the tenant's active agents; another tenant's agent is a 404."""
    _require_tenant(request)
    try:
        agent = agent_get(agent_id=int(request.POST.get("agent", "")))
    except (ValueError, Agent.DoesNotExist):
        raise Http404("No such agent.") from None
    if not agent.active:
        raise Http404("No such agent.")
    conversation = start_conversation(agent=agent, user=request.user)
    return redirect("chat:conversation", conversation_id=conversation.pk)


@login_required
@require_GET
def conversation_detail(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """One conversation: its history rendered here, new turns over the websocket (static/js/chat.js)."""
    _require_tenant(request)
    try:
        conversation = selectors.conversation_for_viewer(
            conversation_id=conversation_id, user=request.user, can_administer=_can_administer(request)
        )
    except Conversation.DoesNotExist:
        raise Http404("No such conversation.") from None
    history = selectors.chat_history(conversation=conversation)
    context = getattr(conversation, "context", None)
    own = conversation.user_id == request.user.pk
    return render(
        request,
        "chat/conversation.html",
        {
            "conversation": conversation,
            "history": history,
            "strategy_label": context.get_strategy_display() if context is not None else "",
            "strategy": context.strategy if context is not None else "",
            "own": own,
            "chat_config": {
                "wsPath": f"/ws/chat/{conversation.pk}/",
                "lastSeq": selectors.stream_resume_seq(conversation_id=conversation.pk),
            },
            "chat_labels": _labels(),
            "plan": selectors.conversation_plan(conversation=conversation),
        },
    )

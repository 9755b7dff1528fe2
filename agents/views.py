"""The agent pages (outside the admin): list, create, edit, detail with versions and metrics, publish.

Every member of the tenant sees the agents; owners and admins change and publish them. Another tenant's agent
is a 404 on every page (the tenant scope of the request finds nothing).
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from agents.config import agent_config
from agents.forms import AgentConfigForm
from agents.limits import MAX_MESSAGE_CHARS, message_limit
from agents.models import Agent, AgentKind
from agents.publishgate import PublishRefused
from agents.sections import agent_sections
from agents.selectors import (
    agent_conversation_count,
    agent_conversations_of_user,
    agent_feedback,
    agent_get,
    agent_list_for_page,
    agent_versions,
)
from agents.services import agent_create, agent_publish, agent_update, conversation_start
from memory.links import conversation_page, conversation_page_registered
from memory.selectors import overflow_metrics_for_agent
from tenants.decorators import administrators_only, may_administer, tenant_required

# Owners and admins change; members read (tenants.decorators says it once for every page).
may_edit_agents = may_administer
editors_only = administrators_only("agents/forbidden.html")


def _agent_or_404(agent_id: int) -> Agent:
    # The request's tenant scope makes another tenant's id look like a missing one.
    try:
        return agent_get(agent_id=agent_id)
    except Agent.DoesNotExist:
        raise Http404(_("No such agent in this tenant.")) from None


def _add_service_errors(form: AgentConfigForm, error: ValidationError) -> None:
    for field, errors in error.message_dict.items():
        if field == "tenant":
            continue  # the tenant is not chosen on these pages; a unique name is reported on the name
        form.add_error(field if field in form.fields else None, errors)
    if not form.errors:
        form.add_error(None, error.messages)


def _message_limit_help(agent: Agent | None) -> str:
    """The longest message the agent's saved draft takes, as the pages say it (agents.limits)."""
    if agent is None:
        return _(
            "A message to an agent may be at most %(max)s characters, and less when its model's context window is "
            "small: what fits after the system prompt and the reply's reserve (shown here once the agent is saved)."
        ) % {"max": MAX_MESSAGE_CHARS}
    return message_limit(agent_config(agent=agent)).help_text()


@tenant_required
def agent_list(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "agents/list.html",
        {"agents": agent_list_for_page(), "may_edit": may_edit_agents(request)},
    )


@editors_only
@require_http_methods(["GET", "POST"])
def agent_new(request: HttpRequest) -> HttpResponse:
    form = AgentConfigForm(request.POST or None, tenant=request.tenant)
    if request.method == "POST" and form.is_valid():
        try:
            agent = agent_create(tenant=request.tenant, name=form.cleaned_data["name"], **form.service_fields())
        except ValidationError as exc:
            _add_service_errors(form, exc)
        else:
            messages.success(request, _("Saved “%(name)s” as a draft. Publish it to let new conversations use it.")
                             % {"name": agent.name})  # fmt: skip
            return HttpResponseRedirect(reverse("agents:detail", args=[agent.pk]))
    return render(
        request, "agents/form.html", {"form": form, "agent": None, "message_limit": _message_limit_help(None)}
    )


@editors_only
@require_http_methods(["GET", "POST"])
def agent_edit(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = _agent_or_404(agent_id)
    limit = _message_limit_help(agent)  # of the saved draft: the form writes what is typed into `agent`
    form = AgentConfigForm(request.POST or None, instance=agent, tenant=request.tenant)
    if request.method == "POST" and form.is_valid():
        try:
            agent_update(agent=agent, name=form.cleaned_data["name"], **form.service_fields())
        except ValidationError as exc:
            _add_service_errors(form, exc)
        else:
            messages.success(request, _("Saved the draft. Publish it to let new conversations use it."))
            return HttpResponseRedirect(reverse("agents:detail", args=[agent.pk]))
    return render(request, "agents/form.html", {"form": form, "agent": agent, "message_limit": limit})


@tenant_required
def agent_detail(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = _agent_or_404(agent_id)
    versions = agent_versions(agent=agent)
    may_edit = may_edit_agents(request)
    # The chat page lives on a floor above: it registers where a conversation is read (memory.links).
    conversations = [
        (conversation, url)
        for conversation in agent_conversations_of_user(agent=agent, user=request.user, with_tests=may_edit)
        if (url := conversation_page(conversation)) is not None
    ]
    chat_available = conversation_page_registered()
    # Like the metrics, every member of the tenant sees the ratings' counts (never who rated, nor the comments).
    feedback = agent_feedback(agent=agent)
    return render(
        request,
        "agents/detail.html",
        {
            "agent": agent,
            "config": agent.overflow_config(),
            "versions": [(version, feedback.for_version(version.number)) for version in versions],
            "published": versions[0] if versions else None,
            "feedback": feedback,
            "metrics": overflow_metrics_for_agent(agent_id=agent.pk),
            "message_limit": _message_limit_help(agent),
            "chat_available": chat_available,
            "conversations": conversations,
            "conversation_count": agent_conversation_count(agent=agent),
            "may_edit": may_edit,
            "may_try_draft": chat_available and agent.kind != AgentKind.GOAL,
            # What apps above add to the page (agents.sections): the evaluation's latest run per version.
            "sections": agent_sections(agent=agent, request=request),
        },
    )


@editors_only
@require_POST
def agent_try_draft(request: HttpRequest, agent_id: int) -> HttpResponse:
    """Start a test conversation on the agent's unpublished draft and open it in the chat: owners and admins only
    (members get the explanation page); another tenant's agent is a 404. A goal agent runs from its own page."""
    agent = _agent_or_404(agent_id)
    if agent.kind == AgentKind.GOAL or not conversation_page_registered():
        raise Http404(_("This agent is not tried in the chat."))
    conversation = conversation_start(agent=agent, user=request.user, draft=True)
    return HttpResponseRedirect(conversation_page(conversation))


@editors_only
@require_http_methods(["GET", "POST"])
def agent_publish_view(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = _agent_or_404(agent_id)
    if request.method == "POST":
        try:
            version = agent_publish(agent=agent, user=request.user)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        except PublishRefused as refused:
            messages.error(request, refused.message)
        else:
            messages.success(
                request,
                _("Published version %(number)s. New conversations use it; ongoing ones keep their version.")
                % {"number": version.number},
            )
        return HttpResponseRedirect(reverse("agents:detail", args=[agent.pk]))
    return render(request, "agents/publish.html", {"agent": agent, "published": agent.published_version()})

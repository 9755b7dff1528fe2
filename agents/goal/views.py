"""The goal-run pages: the runs, starting one, a run's page (status, limits, usage, iterations; polled while it
goes on), Stop and the answer to the run's question.

Members start runs and see their own; the tenant's owners and admins see every run of the tenant. Another
member's run (for a member) and another tenant's run are a 404.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents.goal.forms import GoalAnswerForm, GoalRunForm
from agents.goal.loop import tokens_in_last_hour
from agents.goal.models import GoalRun
from agents.goal.selectors import goal_agents, goal_run_for, goal_run_steps, goal_runs_for_page
from agents.goal.services import goal_run_answer, goal_run_start, goal_run_stop
from agents.models import Agent, AgentKind
from agents.selectors import agent_get
from tenants.decorators import may_administer, tenant_required


def _run_or_404(request: HttpRequest, run_id: int) -> GoalRun:
    run = goal_run_for(run_id=run_id, user=request.user, see_all=may_administer(request))
    if run is None:
        raise Http404(_("No such goal run."))
    return run


def _goal_agent_or_404(agent_id: int) -> Agent:
    try:
        agent = agent_get(agent_id=agent_id)
    except Agent.DoesNotExist:
        raise Http404(_("No such agent in this tenant.")) from None
    if agent.kind != AgentKind.GOAL:
        raise Http404(_("This agent is not a long-lived goal agent."))
    return agent


@tenant_required
@require_GET
def goal_list(request: HttpRequest) -> HttpResponse:
    see_all = may_administer(request)
    return render(
        request,
        "agents/goal_list.html",
        {"runs": goal_runs_for_page(user=request.user, see_all=see_all), "agents": goal_agents(), "see_all": see_all},
    )


@tenant_required
@require_http_methods(["GET", "POST"])
def goal_start(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = _goal_agent_or_404(agent_id)
    form = GoalRunForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            run = goal_run_start(agent=agent, user=request.user, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, _("The run has started. This page follows it."))
            return HttpResponseRedirect(reverse("agents:goal_run", args=[run.pk]))
    runs = goal_runs_for_page(user=request.user, see_all=False, agent=agent, limit=20)
    return render(request, "agents/goal_start.html", {"agent": agent, "form": form, "runs": runs})


def _live_context(request: HttpRequest, run: GoalRun) -> dict:
    steps, total = goal_run_steps(run=run)
    return {
        "run": run,
        "steps": steps,
        "steps_total": total,
        "tokens_last_hour": tokens_in_last_hour(run=run, now=timezone.now()),
        "elapsed_seconds": int(((run.ended_at or timezone.now()) - run.started_at).total_seconds()),
        "mine": run.user_id == request.user.pk,
    }


@tenant_required
@require_GET
def goal_run(request: HttpRequest, goal_run_id: int) -> HttpResponse:
    run = _run_or_404(request, goal_run_id)
    context = {**_live_context(request, run), "answer_form": GoalAnswerForm()}
    return render(request, "agents/goal_run.html", context)


@tenant_required
@require_GET
def goal_run_state(request: HttpRequest, goal_run_id: int) -> JsonResponse:
    """What the run page's poll (static/js/goal_run.js) redraws: the live part as HTML, and the run's state."""
    run = _run_or_404(request, goal_run_id)
    html = render_to_string("agents/goal_live.html", _live_context(request, run), request=request)
    return JsonResponse(
        {
            "status": run.status,
            "active": run.active,
            "waiting": run.waiting and run.user_id == request.user.pk,
            "question": run.question,
            "stop_requested": run.stop_requested,
            "html": html,
        }
    )


@tenant_required
@require_POST
def goal_run_stop_view(request: HttpRequest, goal_run_id: int) -> HttpResponse:
    run = goal_run_stop(run=_run_or_404(request, goal_run_id))
    if run.active:
        messages.info(request, _("Stop requested: the run stops after its current iteration."))
    else:
        messages.success(request, _("The run is stopped."))
    return HttpResponseRedirect(reverse("agents:goal_run", args=[run.pk]))


@tenant_required
@require_POST
def goal_run_answer_view(request: HttpRequest, goal_run_id: int) -> HttpResponse:
    run = _run_or_404(request, goal_run_id)
    if run.user_id != request.user.pk:
        # The question is the run's user's to answer; administrators only watch.
        raise Http404(_("Only the user who started the run answers its questions."))
    form = GoalAnswerForm(request.POST)
    if form.is_valid():
        try:
            answered = goal_run_answer(run=run, text=form.cleaned_data["answer"])
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            if answered:
                messages.success(request, _("Thank you: the run goes on with your answer."))
            else:
                messages.error(request, _("The run no longer waits for an answer (it went on, or it ended)."))
    else:
        messages.error(request, " ".join(error for errors in form.errors.values() for error in errors))
    return HttpResponseRedirect(reverse("agents:goal_run", args=[run.pk]))

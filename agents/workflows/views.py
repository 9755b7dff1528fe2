"""Workflow pages: list, editor (validation messages with step, field and line), templates, run log, YAML export
and import; and agent export/import. Members read; owners and admins change. Another tenant's id is a 404."""

from __future__ import annotations

from urllib.parse import quote

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from agents.export import AgentImportError, agent_export, agent_import, export_filename
from agents.models import Agent, AgentKind, Workflow, WorkflowRun
from agents.views import editors_only, may_edit_agents, tenant_required
from agents.workflows.schema import WorkflowIssue, WorkflowValidationError, step_type_labels
from agents.workflows.services import (
    workflow_bind_agent,
    workflow_get,
    workflow_list,
    workflow_run_get,
    workflow_runs,
    workflow_save,
)
from agents.workflows.templates import template_for, templates_for

MAX_UPLOAD = 512 * 1024


def _workflow_or_404(workflow_id: int) -> Workflow:
    try:
        return workflow_get(workflow_id=workflow_id)
    except Workflow.DoesNotExist:
        raise Http404(_("No such workflow in this tenant.")) from None


def _agent_or_404(agent_id: int) -> Agent:
    try:
        return Agent.objects.get(pk=agent_id)
    except Agent.DoesNotExist:
        raise Http404(_("No such agent in this tenant.")) from None


def _workflow_agents() -> list[Agent]:
    return list(Agent.objects.filter(kind=AgentKind.WORKFLOW).order_by("name"))


def _error_rows(text: str, issues: list[WorkflowIssue]) -> list[dict]:
    """Each error with the text of its line, to show the message next to the line it is about."""
    lines = text.split("\n")
    rows = []
    for issue in issues:
        row = issue.as_dict()
        row["text"] = str(issue)
        row["line_text"] = lines[issue.line - 1] if issue.line and 0 < issue.line <= len(lines) else ""
        rows.append(row)
    return rows


def _chosen_agent(request: HttpRequest) -> tuple[Agent | None, bool]:
    value = request.POST.get("agent") or ""
    if not value:
        return None, True
    if not value.isdigit():
        return None, False
    agent = Agent.objects.filter(pk=int(value), kind=AgentKind.WORKFLOW).first()
    return agent, agent is not None


def _editor(request: HttpRequest, workflow: Workflow | None, text: str, errors: list[dict], status: int = 200):
    return render(
        request,
        "agents/workflows/editor.html",
        {
            "workflow": workflow,
            "text": text,
            "errors": errors,
            "may_edit": may_edit_agents(request),
            "workflow_agents": _workflow_agents(),
            "bound_agent_id": workflow.agent_id if workflow else None,
            "step_types": step_type_labels(),
        },
        status=status,
    )


def _save(request: HttpRequest, workflow: Workflow | None) -> HttpResponse:
    text = request.POST.get("yaml", "").replace("\r\n", "\n")
    agent, agent_ok = _chosen_agent(request)
    if not agent_ok:
        errors = [{"text": _("Choose a workflow agent of this tenant."), "line_text": "", "line": None}]
        return _editor(request, workflow, text, errors, status=400)
    try:
        saved = workflow_save(tenant=request.tenant, yaml_text=text, workflow=workflow)
    except WorkflowValidationError as exc:
        return _editor(request, workflow, text, _error_rows(text, exc.errors), status=400)
    workflow_bind_agent(workflow=saved, agent=agent)
    messages.success(request, _("Saved the workflow “%(name)s”.") % {"name": saved.name})
    return HttpResponseRedirect(reverse("agents:workflows:edit", args=[saved.pk]))


@tenant_required
def workflow_list_view(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "agents/workflows/list.html",
        {
            "workflows": workflow_list(),
            "templates": [(template.key, template.label) for template in templates_for(request.tenant)],
            "may_edit": may_edit_agents(request),
            "step_types": step_type_labels(),
        },
    )


@editors_only
@require_http_methods(["GET", "POST"])
def workflow_new(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _save(request, None)
    template = template_for(request.GET.get("template", ""), tenant=request.tenant)
    text = template.text() if template is not None else "version: '1.0'\nname: ''\ndescription: ''\nsteps:\n"
    return _editor(request, None, text, [])


@tenant_required
@require_http_methods(["GET", "POST"])
def workflow_edit(request: HttpRequest, workflow_id: int) -> HttpResponse:
    workflow = _workflow_or_404(workflow_id)
    if request.method == "POST":
        if not may_edit_agents(request):
            return render(request, "agents/forbidden.html", status=403)
        return _save(request, workflow)
    return _editor(request, workflow, workflow.yaml, [])


def _reader(request: HttpRequest) -> int | None:
    """Whose runs the reader may open: None (all) for administrators, else their own user id."""
    return None if may_edit_agents(request) else request.user.pk


@tenant_required
def workflow_runs_view(request: HttpRequest, workflow_id: int) -> HttpResponse:
    workflow = _workflow_or_404(workflow_id)
    runs = workflow_runs(workflow=workflow, user_id=_reader(request))
    return render(request, "agents/workflows/runs.html", {"workflow": workflow, "runs": runs})


@tenant_required
def workflow_run_view(request: HttpRequest, workflow_id: int, run_id: int) -> HttpResponse:
    workflow = _workflow_or_404(workflow_id)
    try:
        run = workflow_run_get(workflow=workflow, run_id=run_id, user_id=_reader(request))
    except WorkflowRun.DoesNotExist:
        raise Http404(_("No such run of this workflow.")) from None
    return render(request, "agents/workflows/run.html", {"workflow": workflow, "run": run})


@tenant_required
def workflow_export(request: HttpRequest, workflow_id: int) -> HttpResponse:
    workflow = _workflow_or_404(workflow_id)
    response = HttpResponse(workflow.yaml, content_type="application/x-yaml; charset=utf-8")
    response["Content-Disposition"] = f"attachment; filename*=UTF-8''{_quote(workflow.name)}.yaml"
    return response


def _quote(name: str) -> str:

    return quote(name, safe="")


def _upload_text(request: HttpRequest) -> str | None:
    upload = request.FILES.get("file")
    if upload is None or upload.size > MAX_UPLOAD:
        return None
    try:
        return upload.read().decode("utf-8-sig").replace("\r\n", "\n")
    except UnicodeDecodeError:
        return None


@editors_only
@require_POST
def workflow_import(request: HttpRequest) -> HttpResponse:
    text = _upload_text(request)
    if text is None:
        messages.error(request, _("Upload a UTF-8 YAML file of at most 512 KB."))
        return HttpResponseRedirect(reverse("agents:workflows:list"))
    try:
        workflow = workflow_save(tenant=request.tenant, yaml_text=text)
    except WorkflowValidationError as exc:
        # The editor shows the errors next to their lines, with the uploaded text kept for fixing.
        return _editor(request, None, text, _error_rows(text, exc.errors), status=400)
    messages.success(request, _("Imported the workflow “%(name)s”.") % {"name": workflow.name})
    return HttpResponseRedirect(reverse("agents:workflows:edit", args=[workflow.pk]))


@editors_only
def agent_export_view(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = _agent_or_404(agent_id)
    response = HttpResponse(agent_export(agent=agent), content_type="application/x-yaml; charset=utf-8")
    response["Content-Disposition"] = f"attachment; filename*=UTF-8''{_quote(export_filename(agent.name))}"
    return response


@editors_only
@require_POST
def agent_import_view(request: HttpRequest) -> HttpResponse:
    text = _upload_text(request)
    if text is None:
        messages.error(request, _("Upload a UTF-8 YAML file of at most 512 KB."))
        return HttpResponseRedirect(reverse("agents:list"))
    try:
        agent = agent_import(tenant=request.tenant, text=text)
    except AgentImportError as exc:
        for error in exc.errors:
            messages.error(request, _("Import refused: %(error)s") % {"error": error})
        return HttpResponseRedirect(reverse("agents:list"))
    messages.success(request, _("Imported the agent “%(name)s” as a draft.") % {"name": agent.name})
    return HttpResponseRedirect(reverse("agents:detail", args=[agent.pk]))

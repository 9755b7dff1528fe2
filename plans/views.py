"""Plan views: a stored step record (a report file) for a member of its tenant; a plan's log for its admins."""

from __future__ import annotations

import uuid

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from core.markdown import render_markdown
from memory.links import conversation_page
from plans.models import Plan
from plans.selectors import access_plan, plan_log_entries, plan_step_rows, record_for_tenant, status_label
from tenants.decorators import may_administer, tenant_required


@tenant_required
@require_GET
def record_detail(request: HttpRequest, record_id: uuid.UUID) -> HttpResponse:
    """The record rendered as HTML; ?download=1 (or ?format=md) gives the raw Markdown as a file."""
    # A member opens the records of their own plans (links in their chat); administrators open every record.
    reader = None if may_administer(request) else request.user.pk
    record = record_for_tenant(tenant=request.tenant, record_id=record_id, user_id=reader)
    if record is None:
        raise Http404("No such record.")
    if request.GET.get("download") or request.GET.get("format") == "md":
        response = HttpResponse(record.content, content_type=f"{record.content_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{record.recordId}.md"'
        return response
    title = record.step.agentName if record.step else str(record.recordId)
    return render(
        request, "plans/record.html", {"record": record, "title": title, "body": render_markdown(record.content)}
    )


@tenant_required
@require_GET
def plan_log(request: HttpRequest, plan_id: uuid.UUID) -> HttpResponse:
    """The plan's log (O1) for owners and admins of its tenant: its steps (each linked to its agent's internal
    conversation), then every log row with a one-line summary and its data as JSON; ?step=N shows one step's rows."""
    if not may_administer(request):
        raise PermissionDenied("Only the tenant's owners and admins read plan logs.")
    try:
        plan = access_plan(
            user=request.user, membership=getattr(request, "membership", None), tenant=request.tenant, plan_id=plan_id
        )
    except Plan.DoesNotExist:
        raise Http404("No such plan.") from None
    raw = request.GET.get("step", "")
    step = int(raw) if raw.lstrip("-").isdigit() else None
    context = {
        "plan": plan,
        "status_label": status_label(plan.status),
        "steps": plan_step_rows(plan=plan),
        "entries": plan_log_entries(plan=plan, step=step),
        "step": step,
        "conversation_url": conversation_page(plan.conversation),
    }
    return render(request, "plans/log.html", context)

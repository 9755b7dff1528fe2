"""Plan selectors: a tenant's records and plans, and the plan log as a person reads it (steps, then every row)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import pgettext

from agents.progress import ProgressLine, step_status_labels
from agents.tools import tool_labels
from memory.links import conversation_page
from memory.models import Conversation
from plans.models import LogKind, Plan, PlanLog, PlanStatus, PlanStep, StepRecord, StepStatus
from tenants.access import may_administer


def record_for_tenant(*, tenant: Any, record_id: uuid.UUID, user_id: int | None = None) -> StepRecord | None:
    """The tenant's step record with this recordId, or None (another tenant's record is never found). With
    `user_id`, only a record of that user's plan (a member's; administrators pass None and read every record)."""
    records = StepRecord.objects.filter(tenant=tenant, recordId=record_id).select_related("step")
    if user_id is not None:
        records = records.filter(step__plan__conversation__user_id=user_id)
    return records.first()


def plans_readable(
    *, user: Any, membership: Any, tenant: Any, agent_ids: Iterable[int] | None = None
) -> QuerySet[Plan]:
    """The tenant's plans `user` may read, newest first: the plans of their own conversations, every plan for the
    tenant's administrators (tenants.access.may_administer). `agent_ids` (an API key limited to some agents)
    keeps the plans of those agents' conversations. Another tenant's plans are never among them."""
    plans = Plan.objects.filter(tenant=tenant).select_related("conversation").order_by("-created_at")
    if not may_administer(user=user, membership=membership):
        plans = plans.filter(conversation__user_id=user.pk)
    if agent_ids:
        plans = plans.filter(conversation__agent__in=agent_ids)
    return plans


def access_plan(
    *, user: Any, membership: Any, tenant: Any, plan_id: uuid.UUID, agent_ids: Iterable[int] | None = None
) -> Plan:
    """The plan `plan_id` if `user` may read it (`plans_readable`'s rule), with its conversation loaded; else
    Plan.DoesNotExist: another tenant's id, another member's plan. The one rule for the plan pages and the API
    (as memory.selectors.access_conversation is for conversations); the log is for administrators on top of it."""
    return plans_readable(user=user, membership=membership, tenant=tenant, agent_ids=agent_ids).get(planId=plan_id)


def status_label(value: Any) -> str:
    """A plan's or step's status in the reader's language, in the chat's words (agents.progress: an interrupted
    step or plan waits for the user's answer)."""
    labels = {**dict(PlanStatus.choices), **dict(StepStatus.choices), **step_status_labels()}
    return str(labels.get(value, value or ""))


def _event_label(value: Any) -> str:
    labels = {
        "created": pgettext("plan log event", "plan created"),
        "resumed": pgettext("plan log event", "resumed with the user's reply"),
        "before_step": pgettext("plan log event", "before the step"),
        "after_step": pgettext("plan log event", "after the step"),
        "ask_timeout": pgettext("plan log event", "waiting for the user's reply"),
    }
    return str(labels.get(value, value or ""))


def _role_label(value: Any) -> str:
    labels = {
        "planner": pgettext("plan log role", "planner"),
        "finalizer": pgettext("plan log role", "final summary"),
        "step": pgettext("plan log role", "step agent"),
    }
    return str(labels.get(value, value or ""))


@dataclass
class LogEntry:
    """One PlanLog row as the log page shows it: a one-line summary and the whole data as indented JSON."""

    log: PlanLog
    summary: SafeString | str
    data_json: str

    @property
    def step(self) -> int | None:
        return self.log.step


@dataclass
class StepRow:
    """One step of the plan on the log page: its status, what it answered, and its internal conversation."""

    step: PlanStep
    status_label: str
    output: str
    conversation_url: str | None


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())  # one line
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _output(result: Any) -> str:
    return str(result.get("output") or "") if isinstance(result, dict) else ""


def _result(value: Any, limit: int) -> SafeString:
    """A tool's result, shortened: data (JSON) as code, text as it is."""
    text = _short(value, limit)
    return format_html("<code>{}</code>", text) if text[:1] in "{[" else format_html("{}", text)


def _field_value(value: Any) -> SafeString:
    """An argument's value: text as it is, data (numbers, lists, objects) as code."""
    text = _short(value, 80)
    if isinstance(value, str) and not value.lstrip().startswith(("{", "[")):
        return format_html("{}", text)
    return format_html("<code>{}</code>", text)  # data, or data written as JSON text


def argument_fields(arguments: Any) -> SafeString:
    """A call's arguments as `name: value` fields (the name is the tool's own identifier, shown as code)."""
    if not isinstance(arguments, dict):
        return format_html("<code>{}</code>", _short(arguments, 80)) if arguments else format_html("")
    return format_html_join(
        "",
        '<span class="plan-field"><code>{}</code>: {}</span>',
        ((str(name), _field_value(value)) for name, value in arguments.items()),
    )


def _tool_call_summary(data: dict[str, Any], known: dict[str, str]) -> SafeString:
    """A tool call (or a workflow agent's step) as the chat's line says it, its arguments as fields, its result."""
    words = {key: str(data.get(key) or "") for key in ("name", "status", "step_type", "tool")}
    line = ProgressLine(**words, known=known)
    summary = format_html('<span class="plan-tool-line" title="{}">{}</span>', line.name, line.html())
    fields = argument_fields(data.get("arguments"))
    if fields:
        summary = format_html('{} <span class="plan-fields">{}</span>', summary, fields)
    if data.get("result"):
        summary = format_html("{} → {}", summary, _result(data["result"], 100))
    return summary


def _model_call_summary(data: dict[str, Any], known: dict[str, str]) -> SafeString:
    usage = data.get("usage") or {}
    parts = [_role_label(data.get("role"))]
    if data.get("call_id"):
        parts.append(pgettext("plan log", "call %(id)s") % {"id": data["call_id"]})
    if data.get("tool_calls"):
        separator = pgettext("list separator", ", ")
        labels = [ProgressLine(name=str(name), known=known).label_html() for name in data["tool_calls"]]
        parts.append(format_html("→ {}", format_html_join(separator, "{}", ((label,) for label in labels))))
    if usage:
        parts.append(
            _("Tokens: %(prompt)s prompt + %(completion)s completion")
            % {"prompt": usage.get("prompt_tokens", 0), "completion": usage.get("completion_tokens", 0)}
        )
    return format_html_join(" · ", "{}", ((part,) for part in parts if part))


def _state_summary(data: dict[str, Any]) -> str:
    parts = []
    if data.get("event"):
        parts.append(_event_label(data["event"]))
    if data.get("status"):
        parts.append(status_label(data["status"]))
    if data.get("seconds"):
        parts.append(pgettext("plan log", "timeout %(seconds)s s") % {"seconds": data["seconds"]})
    if data.get("userQuery"):
        parts.append(_short(data["userQuery"], 80))
    line = " · ".join(parts)
    if _output(data.get("result")):
        line += f" → {_short(_output(data['result']), 100)}"
    return line


def _summary(log: PlanLog, known: dict[str, str]) -> SafeString | str:
    """One log row in a line, in the chat's words: tools by their labels, arguments as fields (identifiers and data
    as code), the rest as text."""
    data = log.data if isinstance(log.data, dict) else {}
    if log.kind == LogKind.TOOL_CALL:
        return _tool_call_summary(data, known)
    if log.kind == LogKind.MODEL_CALL:
        return _model_call_summary(data, known)
    return _state_summary(data)


def plan_log_entries(*, plan: Plan, step: int | None = None) -> list[LogEntry]:
    """The plan's log in order (O1: state before/after each step, model calls, tool calls), or one step's rows."""
    rows = PlanLog.objects.filter(plan=plan).order_by("id")
    if step is not None:
        rows = rows.filter(step=step)
    known = tool_labels(tenant=plan.tenant)  # the tenant's MCP tools' labels too
    return [
        LogEntry(log=row, summary=_summary(row, known), data_json=json.dumps(row.data, ensure_ascii=False, indent=2))
        for row in rows
    ]


def plan_step_rows(*, plan: Plan) -> list[StepRow]:
    """The plan's steps in order, each with the page of its agent's internal conversation (the child conversation
    of the plan's conversation with that agent, Conversation.parent; administrators open it, members never)."""
    children: dict[str, Conversation] = {}
    for child in (
        Conversation.objects.filter(tenant_id=plan.tenant_id, parent_id=plan.conversation_id)
        .select_related("agent")
        .order_by("pk")
    ):
        children.setdefault(child.agent.name, child)
    rows = []
    for step in plan.steps.order_by("seqNo"):
        child = children.get(step.agentName)
        rows.append(
            StepRow(
                step=step,
                status_label=status_label(step.status),
                output=_short(_output(step.result), 160),
                conversation_url=conversation_page(child) if child is not None else None,
            )
        )
    return rows

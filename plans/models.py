"""Plans (seed 0's ExecutionPlan): a plan, its steps, stored step records (large outputs, files) and its log."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from tenants.models import TenantOwned


class PlanStatus(models.TextChoices):
    RUNNING = "running", _("running")
    INTERRUPTED = "interrupted", _("interrupted")
    COMPLETED = "completed", _("completed")
    FAILED = "failed", _("failed")
    STOPPED = "stopped", _("stopped")


class StepStatus(models.TextChoices):
    NOT_STARTED = "not_started", _("not started")
    IN_PROGRESS = "in_progress", _("in progress")
    COMPLETED = "completed", _("completed")
    INTERRUPTED = "interrupted", _("interrupted")
    FAILED = "failed", _("failed")
    STOPPED = "stopped", _("stopped")


class LogKind(models.TextChoices):
    STATE = "state", _("state")
    MODEL_CALL = "model_call", _("model call")
    TOOL_CALL = "tool_call", _("tool call")


class Plan(TenantOwned):
    """One execution plan of a planner conversation; its state lives only here (a fresh executor resumes it)."""

    planId = models.UUIDField(_("plan id"), default=uuid.uuid4, unique=True, editable=False)
    name = models.CharField(_("name"), max_length=200, blank=True)
    userQuery = models.TextField(_("user query"), blank=True)
    status = models.CharField(_("status"), max_length=20, choices=PlanStatus.choices, default=PlanStatus.RUNNING)
    context = models.JSONField(_("context"), default=dict, blank=True)
    conversation = models.ForeignKey(
        "memory.Conversation", on_delete=models.CASCADE, related_name="plans", verbose_name=_("conversation")
    )
    allow_concurrency = models.BooleanField(_("allow concurrency"), default=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("plan")
        verbose_name_plural = _("plans")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name or str(self.planId)

    def as_execution_plan(self) -> dict[str, Any]:
        """Seed 0's ExecutionPlan dict."""
        return {
            "planId": str(self.planId),
            "name": self.name,
            "userQuery": self.userQuery,
            "status": self.status,
            "steps": [step.as_dict() for step in self.steps.order_by("seqNo")],
            "context": self.context or {},
        }


class PlanStep(TenantOwned):
    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="steps", verbose_name=_("plan"))
    seqNo = models.PositiveIntegerField(_("sequence number"))
    agentName = models.CharField(_("agent name"), max_length=120)
    requirement = models.TextField(_("requirement"))
    status = models.CharField(_("status"), max_length=20, choices=StepStatus.choices, default=StepStatus.NOT_STARTED)
    result = models.JSONField(_("result"), null=True, blank=True)
    depends_on = models.JSONField(_("depends on"), default=list, blank=True)

    class Meta:
        verbose_name = _("plan step")
        verbose_name_plural = _("plan steps")
        ordering = ["plan", "seqNo"]
        constraints = [models.UniqueConstraint(fields=["plan", "seqNo"], name="plans_step_unique_seq")]

    def __str__(self) -> str:
        return f"{self.seqNo}. {self.agentName}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "seqNo": self.seqNo,
            "agentName": self.agentName,
            "requirement": self.requirement,
            "status": self.status,
            "result": self.result,
            "depends_on": list(self.depends_on or []),
        }


class StepRecord(TenantOwned):
    """A stored output (too large for a prompt, or a file) that later steps fetch by recordId (P4)."""

    recordId = models.UUIDField(_("record id"), default=uuid.uuid4, unique=True, editable=False)
    step = models.ForeignKey(
        PlanStep, on_delete=models.SET_NULL, null=True, blank=True, related_name="records", verbose_name=_("step")
    )
    content = models.TextField(_("content"), blank=True)
    content_type = models.CharField(_("content type"), max_length=100, default="text/plain")
    file = models.FileField(_("file"), upload_to="plans/records/", blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("step record")
        verbose_name_plural = _("step records")

    def __str__(self) -> str:
        return str(self.recordId)


class PlanLog(TenantOwned):
    """What happened in a plan, for transparency (O1): state changes, model calls, tool calls."""

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="logs", verbose_name=_("plan"))
    step = models.IntegerField(_("step"), null=True, blank=True)
    kind = models.CharField(_("kind"), max_length=20, choices=LogKind.choices)
    data = models.JSONField(_("data"), default=dict, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("plan log")
        verbose_name_plural = _("plan logs")
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.step if self.step is not None else ''}"

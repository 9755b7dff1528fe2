"""A run of a goal agent and the steps of its loop (registered through agents.models, app label "agents")."""

from __future__ import annotations

import json

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from tenants.models import TenantOwned


class GoalRunStatus(models.TextChoices):
    RUNNING = "running", _("running")
    WAITING_FOR_USER = "waiting_for_user", _("waiting for the user")
    STOPPED = "stopped", _("stopped")
    FINISHED = "finished", _("finished")
    LIMIT_REACHED = "limit_reached", _("limit reached")
    FAILED = "failed", _("failed")


# A run in one of these goes on (a loop iterates or waits for the user); the others are ends.
ACTIVE_STATUSES = (GoalRunStatus.RUNNING, GoalRunStatus.WAITING_FOR_USER)


class GoalLimit(models.TextChoices):
    ITERATIONS = "iterations", _("iterations")
    TOKENS_PER_HOUR = "tokens_per_hour", _("tokens per hour")
    WALL_TIME = "wall_time", _("wall time")


class GoalRun(TenantOwned):
    """One run of a goal agent for one user: the goal, its limits, where the loop stands, and what it used."""

    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="goal_runs", verbose_name=_("agent")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("user")
    )
    goal = models.TextField(_("goal"))
    status = models.CharField(
        _("status"), max_length=20, choices=GoalRunStatus.choices, default=GoalRunStatus.RUNNING, db_index=True
    )
    limit_reached = models.CharField(_("limit reached"), max_length=20, choices=GoalLimit.choices, blank=True)
    max_iterations = models.PositiveIntegerField(_("maximum iterations"))
    max_tokens_per_hour = models.PositiveIntegerField(_("maximum tokens per hour"))
    max_wall_seconds = models.PositiveIntegerField(_("maximum wall time (seconds)"))
    stop_requested = models.BooleanField(_("stop requested"), default=False)
    # Counters the page shows (tokens: every model call of the run, M2's, M1's and the dreams').
    iterations = models.PositiveIntegerField(_("iterations"), default=0)
    tool_calls = models.PositiveIntegerField(_("tool calls"), default=0)
    dreams = models.PositiveIntegerField(_("dreams"), default=0)
    tokens = models.PositiveIntegerField(_("tokens"), default=0)
    # The loop's conversation with its model (OpenAI messages after the system prompt): the state a task resumes.
    messages = models.JSONField(_("messages"), default=list, blank=True)
    # The open question while waiting for the user: the tip, the pending tool call, when it was asked, until when.
    question = models.TextField(_("question"), blank=True)
    ask_call_id = models.CharField(_("question's tool call"), max_length=100, blank=True)
    asked_at = models.DateTimeField(_("asked"), null=True, blank=True)
    ask_deadline = models.DateTimeField(_("waits until"), null=True, blank=True)
    result = models.TextField(_("result"), blank=True)
    error = models.TextField(_("error"), blank=True)
    started_at = models.DateTimeField(_("started"), default=timezone.now)
    ended_at = models.DateTimeField(_("ended"), null=True, blank=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        verbose_name = _("goal run")
        verbose_name_plural = _("goal runs")
        indexes = [models.Index(fields=["tenant", "user", "started_at"], name="agents_goalrun_user_time")]

    def __str__(self) -> str:
        return f"{self.goal[:60]} · {self.get_status_display()}"

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def waiting(self) -> bool:
        return self.status == GoalRunStatus.WAITING_FOR_USER


class GoalStepKind(models.TextChoices):
    MODEL = "model", _("model call")
    TOOL = "tool", _("tool call")
    DREAM = "dream", _("dream")
    ASK = "ask", _("question to the user")
    ANSWER = "answer", _("answer")


class GoalStep(TenantOwned):
    """One thing the loop did in an iteration: a model call, a tool call, a dream, a question or its answer."""

    run = models.ForeignKey(GoalRun, on_delete=models.CASCADE, related_name="steps", verbose_name=_("run"))
    iteration = models.PositiveIntegerField(_("iteration"))
    kind = models.CharField(_("kind"), max_length=10, choices=GoalStepKind.choices)
    name = models.CharField(_("name"), max_length=100, blank=True)
    arguments = models.JSONField(_("arguments"), default=dict, blank=True)
    summary = models.TextField(_("result"), blank=True)
    ok = models.BooleanField(_("succeeded"), default=True)
    tokens = models.PositiveIntegerField(_("tokens"), default=0)
    duration_ms = models.PositiveIntegerField(_("duration (ms)"), default=0)
    # Set by the loop's clock (injectable), not auto_now_add: the tokens-per-hour window is counted from it.
    at = models.DateTimeField(_("time"), default=timezone.now)

    class Meta:
        ordering = ["run", "id"]
        verbose_name = _("goal step")
        verbose_name_plural = _("goal steps")
        indexes = [models.Index(fields=["run", "at"], name="agents_goalstep_run_time")]

    def __str__(self) -> str:
        return f"{self.iteration} · {self.kind} {self.name}"

    @property
    def arguments_text(self) -> str:
        """The arguments as compact JSON, for the run page ("" when there are none)."""
        return json.dumps(self.arguments, ensure_ascii=False) if self.arguments else ""

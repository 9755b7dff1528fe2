"""Writes of goal runs from outside the loop: start, stop, the user's answer, the question's timeout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.goal import dispatch
from agents.goal.models import GoalRun, GoalRunStatus, GoalStep, GoalStepKind
from agents.models import Agent, AgentKind
from core.conf import setting
from llm.messages import ChatMessage, wire

# What the question's tool call returns when its timeout passes without an answer (seed 3's I()).
NO_REPLY = "用户暂未回复 / the user has not replied yet"
# The loop's first message: the goal itself is in the system prompt.
KICKOFF = "开始。/ Begin."
MAX_GOAL_CHARS = 4000
MAX_ANSWER_CHARS = 4000


@dataclass(frozen=True)
class LimitBounds:
    """A run's limits: the settings give the default and the most an operator may set."""

    max_iterations: int
    max_tokens_per_hour: int
    max_wall_seconds: int

    @classmethod
    def from_settings(cls) -> LimitBounds:
        return cls(
            max_iterations=int(setting("GOAL_MAX_ITERATIONS")),
            max_tokens_per_hour=int(setting("GOAL_MAX_TOKENS_PER_HOUR")),
            max_wall_seconds=int(setting("GOAL_MAX_WALL_SECONDS")),
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "max_iterations": self.max_iterations,
            "max_tokens_per_hour": self.max_tokens_per_hour,
            "max_wall_seconds": self.max_wall_seconds,
        }


def _limits(given: dict[str, int | None]) -> dict[str, int]:
    bounds = LimitBounds.from_settings().as_dict()
    limits, errors = {}, {}
    for name, most in bounds.items():
        value = given.get(name)
        value = most if value is None else int(value)
        if not 1 <= value <= most:
            errors[name] = _("Give a number from 1 to %(most)s (the platform's limit).") % {"most": most}
        limits[name] = value
    if errors:
        raise ValidationError(errors)
    return limits


@transaction.atomic
def goal_run_start(
    *,
    agent: Agent,
    user: Any,
    goal: str,
    max_iterations: int | None = None,
    max_tokens_per_hour: int | None = None,
    max_wall_seconds: int | None = None,
    queue: bool = True,
) -> GoalRun:
    """Start a run of a goal agent for `user` with limits within the settings' bounds (None: the setting); its
    first task is queued once this commits (`queue=False` leaves running it to the caller, e.g. a test)."""
    goal = (goal or "").strip()
    errors: dict[str, str] = {}
    if agent.kind != AgentKind.GOAL:
        errors["agent"] = _("“%(name)s” is not a long-lived goal agent.") % {"name": agent.name}
    elif not agent.active:
        errors["agent"] = _("“%(name)s” is inactive: an administrator can activate it.") % {"name": agent.name}
    if not goal:
        errors["goal"] = _("Write the goal the agent should work towards.")
    elif len(goal) > MAX_GOAL_CHARS:
        errors["goal"] = _("The goal is too long: at most %(count)s characters.") % {"count": MAX_GOAL_CHARS}
    try:
        limits = _limits(
            {
                "max_iterations": max_iterations,
                "max_tokens_per_hour": max_tokens_per_hour,
                "max_wall_seconds": max_wall_seconds,
            }
        )
    except ValidationError as exc:
        errors.update({name: messages[0] for name, messages in exc.message_dict.items()})
    if errors:
        raise ValidationError(errors)
    run = GoalRun.objects.create(
        tenant_id=agent.tenant_id,
        agent=agent,
        user=user,
        goal=goal,
        messages=wire([ChatMessage.user(KICKOFF)]),
        **limits,
    )
    if queue:
        tenant_id, run_id = run.tenant_id, run.pk
        transaction.on_commit(lambda: dispatch.queue_run(tenant_id=tenant_id, run_id=run_id))
    return run


@transaction.atomic
def goal_run_stop(*, run: GoalRun) -> GoalRun:
    """Stop a run. A waiting run stops at once; a running one between iterations (the loop checks the flag). Asked
    again while the flag is already set (the loop may be gone: a restarted process), the run stops at once."""
    locked = GoalRun.objects.select_for_update().get(pk=run.pk)
    if not locked.active:
        return locked
    if locked.status == GoalRunStatus.WAITING_FOR_USER or locked.stop_requested:
        _end(locked, GoalRunStatus.STOPPED)
        dispatch.cancel_ask_timeout(run_id=locked.pk)
    else:
        locked.stop_requested = True
        locked.save(update_fields=["stop_requested", "updated_at"])
    return locked


def _end(run: GoalRun, status: str, *, now=None) -> None:
    run.status = status
    run.stop_requested = run.stop_requested or status == GoalRunStatus.STOPPED
    run.question, run.ask_call_id, run.ask_deadline = "", "", None
    run.ended_at = now or timezone.now()
    run.save(update_fields=["status", "stop_requested", "question", "ask_call_id", "ask_deadline", "ended_at",
                            "updated_at"])  # fmt: skip


def goal_run_answer(*, run: GoalRun, text: str) -> bool:
    """The user answers the run's open question: the loop resumes with it. False when the run no longer waits."""
    text = (text or "").strip()
    if not text:
        raise ValidationError({"answer": _("Write an answer first.")})
    if len(text) > MAX_ANSWER_CHARS:
        raise ValidationError(
            {"answer": _("The answer is too long: at most %(count)s characters.") % {"count": MAX_ANSWER_CHARS}}
        )
    resumed = _resume(run_id=run.pk, content=text, answered=True)
    if resumed:
        dispatch.cancel_ask_timeout(run_id=run.pk)
    return resumed


def goal_run_ask_timed_out(*, run_id: int, asked_at: str) -> bool:
    """The question asked at `asked_at` was not answered in time: the loop resumes with NO_REPLY. False when the
    user answered first (or the run asked again since, or ended)."""
    return _resume(run_id=run_id, content=NO_REPLY, answered=False, asked_at=asked_at)


@transaction.atomic
def _resume(*, run_id: int, content: str, answered: bool, asked_at: str | None = None) -> bool:
    run = GoalRun.objects.select_for_update().filter(pk=run_id).first()
    if run is None or run.status != GoalRunStatus.WAITING_FOR_USER:
        return False
    if asked_at is not None and (run.asked_at is None or run.asked_at.isoformat() != asked_at):
        return False
    run.messages = [*run.messages, ChatMessage.tool(run.ask_call_id, content).as_dict()]
    GoalStep.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        iteration=run.iterations,
        kind=GoalStepKind.ANSWER,
        name="user" if answered else "timeout",
        summary=content,
    )
    run.status = GoalRunStatus.RUNNING
    run.question, run.ask_call_id, run.ask_deadline = "", "", None
    run.save(update_fields=["messages", "status", "question", "ask_call_id", "ask_deadline", "updated_at"])
    tenant_id = run.tenant_id
    transaction.on_commit(lambda: dispatch.queue_run(tenant_id=tenant_id, run_id=run_id))
    return True

"""Reads of goal runs. One access rule: members see their own runs, the tenant's administrators every run; the
tenant scope makes another tenant's run look missing."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from agents.goal.models import GoalRun, GoalStep
from agents.models import Agent, AgentKind

STEPS_SHOWN = 300


def _visible(*, user: Any, see_all: bool) -> QuerySet[GoalRun]:
    runs = GoalRun.objects.select_related("agent", "user")
    return runs if see_all else runs.filter(user=user)


def goal_run_for(*, run_id: int, user: Any, see_all: bool) -> GoalRun | None:
    """Run `run_id` if `user` may see it (their own, or any of the tenant's when `see_all`), else None."""
    return _visible(user=user, see_all=see_all).filter(pk=run_id).first()


def goal_runs_for_page(*, user: Any, see_all: bool, agent: Agent | None = None, limit: int = 100) -> list[GoalRun]:
    runs = _visible(user=user, see_all=see_all).defer("messages")
    if agent is not None:
        runs = runs.filter(agent=agent)
    return list(runs.order_by("-started_at", "-id")[:limit])


def goal_agents() -> list[Agent]:
    """The scope's active goal agents (the ones a run can be started for)."""
    return list(Agent.objects.filter(kind=AgentKind.GOAL, active=True).order_by("name"))


def goal_run_steps(*, run: GoalRun, limit: int = STEPS_SHOWN) -> tuple[list[GoalStep], int]:
    """The newest `limit` steps of the run, oldest first, and how many steps it has in all."""
    steps = GoalStep.objects.filter(run=run)
    total = steps.count()
    newest = list(steps.order_by("-id")[:limit])
    newest.reverse()
    return newest, total

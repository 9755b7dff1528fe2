"""Reads of the evaluation pages and API: one access helper per model (inside the request's tenant scope, so another
tenant's id is missing like an unknown one), and the lists the pages show."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from agents.models import Agent
from evals.models import Case, CaseResult, Dataset, Run
from memory.models import Feedback


def access_dataset(*, dataset_id: int) -> Dataset:
    """The tenant's dataset (Dataset.DoesNotExist for another tenant's or an unknown one)."""
    return Dataset.objects.select_related("agent").get(pk=dataset_id)


def access_case(*, case_id: int) -> Case:
    return Case.objects.select_related("dataset", "dataset__agent").get(pk=case_id)


def access_run(*, run_id: int) -> Run:
    return Run.objects.select_related("dataset", "agent", "version").get(pk=run_id)


def datasets_of_agent(*, agent: Agent) -> QuerySet[Dataset]:
    """The agent's datasets with their number of cases (`case_count`) and runs (`run_count`)."""
    return (
        Dataset.objects.filter(agent=agent)
        .annotate(case_count=Count("cases", distinct=True), run_count=Count("runs", distinct=True))
        .order_by("name")
    )


def cases_of_dataset(*, dataset: Dataset) -> QuerySet[Case]:
    return Case.objects.filter(dataset=dataset).order_by("position", "id")


def runs_of_dataset(*, dataset: Dataset, limit: int = 50) -> list[Run]:
    """The dataset's runs, newest first (`limit` of them)."""
    return list(Run.objects.filter(dataset=dataset).select_related("version", "started_by").order_by("-id")[:limit])


def runs_of_agent(*, agent: Agent, limit: int = 100) -> list[Run]:
    return list(
        Run.objects.filter(agent=agent).select_related("version", "dataset").order_by("-id")[:limit]
    )  # fmt: skip


def results_of_run(*, run: Run) -> QuerySet[CaseResult]:
    return CaseResult.objects.filter(run=run).select_related("conversation").order_by("position", "id")


def feedback_of_viewer(*, message_id: int, user_id: int) -> Feedback | None:
    """The viewer's own rating of a reply (the chat page's button makes a case of it), or None."""
    return Feedback.objects.filter(message_id=message_id, user_id=user_id).select_related("message").first()

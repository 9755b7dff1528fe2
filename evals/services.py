"""Writes of evaluation datasets, cases and publish gates (issue 39).

Every function runs inside the caller's tenant scope (the door resolved the tenant) and refuses an object of another
tenant as if it did not exist (the model's DoesNotExist, which the doors answer with 404). Bad input is a Django
ValidationError keyed by field ("turns", "expectations", "name", "threshold"...), its words translated.

Cases made from a 👎 reply go, unless the caller names a dataset, into the agent's dataset named
FEEDBACK_DATASET_NAME, one fixed bilingual name (not translated, so the chat button, the admin action and the API
all find the same dataset whatever the clicker's language), created on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max, Model
from django.utils.translation import gettext as _

from agents.models import Agent
from evals.expectations import ExpectationError, ExpectationKind, validate
from evals.io import MAX_EXPECTATIONS, MAX_TURN_CHARS, ImportProblem, parse_cases, turns_problem
from evals.models import Case, CaseSource, Dataset, Gate
from memory.models import Feedback, Message, Role
from tenants.scope import current_tenant

FEEDBACK_DATASET_NAME = "👎 反馈用例 / Feedback cases"
# A case made from a 👎 reply replays at most this many of the user's messages before it (the newest ones).
FEEDBACK_TURNS = 5
DATASET_FIELDS = frozenset({"name", "description", "judge_prompt"})
CASE_FIELDS = frozenset({"title", "turns", "expectations", "position"})


@dataclass
class ImportResult:
    """What an import did: the cases created (0 when any problem: nothing is stored then) and the problems."""

    created: int
    problems: list[ImportProblem] = field(default_factory=list)


def _own(*objects: Model) -> None:
    """Refuse, as not found, an object of another tenant than the scope's (the all-tenants bypass sees every one)."""
    tenant = current_tenant()
    for obj in objects:
        if tenant is not None and obj.tenant_id != tenant.pk:
            raise type(obj).DoesNotExist(f"No {type(obj).__name__} {obj.pk} in this tenant.")


def clean_turns(turns: Any) -> list[str]:
    """The user turns of a case, trimmed (one text is one turn); ValidationError unless 1 to MAX_TURNS texts, none
    empty (evals.io.turns_problem)."""
    if isinstance(turns, str):
        turns = [turns]
    problem = turns_problem(turns)
    if problem:
        raise ValidationError({"turns": problem})
    return [turn.strip() for turn in turns]


def clean_expectations(expectations: Any) -> list[dict[str, Any]]:
    """The expectations of a case, each validated and normalized; ValidationError naming the first wrong one (its
    number and field) unless a list of 1 to MAX_EXPECTATIONS."""
    if not isinstance(expectations, list) or not expectations:
        raise ValidationError({"expectations": _("A case needs at least one expectation.")})
    if len(expectations) > MAX_EXPECTATIONS:
        raise ValidationError(
            {"expectations": _("A case has at most %(max)s expectations.") % {"max": MAX_EXPECTATIONS}}
        )
    normal = []
    for number, expectation in enumerate(expectations, start=1):
        try:
            normal.append(validate(expectation))
        except ExpectationError as exc:
            message = _("Expectation %(number)s: %(error)s") % {"number": number, "error": exc.message}
            raise ValidationError({"expectations": message}, code=exc.field) from exc
    return normal


def _save(dataset: Dataset) -> Dataset:
    """Validate and save a dataset; a name the agent already has (checked, or lost in a race) is a field error."""
    taken = ValidationError({"name": _("This agent already has a dataset with this name.")})
    if Dataset.objects.filter(agent_id=dataset.agent_id, name=dataset.name).exclude(pk=dataset.pk).exists():
        raise taken
    dataset.full_clean(validate_constraints=False)
    try:
        with transaction.atomic():
            dataset.save()
    except IntegrityError as exc:
        raise taken from exc
    return dataset


def dataset_create(
    *, agent: Agent, name: str, user: Any = None, description: str = "", judge_prompt: str = ""
) -> Dataset:
    """A new dataset of `agent`'s cases."""
    _own(agent)
    created_by = user if user is not None and getattr(user, "is_authenticated", False) else None
    dataset = Dataset(
        tenant_id=agent.tenant_id, agent=agent, name=(name or "").strip(), description=description or "",
        judge_prompt=judge_prompt or "", created_by=created_by,
    )  # fmt: skip
    return _save(dataset)


def dataset_update(*, dataset: Dataset, **fields: Any) -> Dataset:
    """Edit a dataset's name, description or judge prompt (empty: the default prompt)."""
    _own(dataset)
    unknown = set(fields) - DATASET_FIELDS
    if unknown:
        raise TypeError(f"dataset_update() got unknown fields: {sorted(unknown)}")
    for name, value in fields.items():
        setattr(dataset, name, (value or "").strip() if name == "name" else value or "")
    return _save(dataset)


def dataset_delete(*, dataset: Dataset) -> None:
    """Delete a dataset with its cases and runs."""
    _own(dataset)
    dataset.delete()


def _next_position(dataset: Dataset) -> int:
    last = Case.objects.filter(dataset=dataset).aggregate(last=Max("position"))["last"]
    return 0 if last is None else last + 1


def case_create(
    *,
    dataset: Dataset,
    turns: Any,
    expectations: Any,
    title: str = "",
    source: str = CaseSource.MANUAL,
    feedback: Feedback | None = None,
) -> Case:
    """A new case at the end of `dataset`: its user turns and the expectations on the reply to the last one."""
    _own(dataset)
    case = Case(
        tenant_id=dataset.tenant_id, dataset=dataset, position=_next_position(dataset), title=(title or "").strip(),
        turns=clean_turns(turns), expectations=clean_expectations(expectations), source=source, feedback=feedback,
    )  # fmt: skip
    case.full_clean()
    case.save()
    return case


def case_update(*, case: Case, **fields: Any) -> Case:
    """Edit a case's title, turns, expectations or position (each validated as case_create does)."""
    _own(case)
    unknown = set(fields) - CASE_FIELDS
    if unknown:
        raise TypeError(f"case_update() got unknown fields: {sorted(unknown)}")
    if "turns" in fields:
        fields["turns"] = clean_turns(fields["turns"])
    if "expectations" in fields:
        fields["expectations"] = clean_expectations(fields["expectations"])
    if "title" in fields:
        fields["title"] = (fields["title"] or "").strip()
    for name, value in fields.items():
        setattr(case, name, value)
    case.full_clean()
    case.save()
    return case


def case_delete(*, case: Case) -> None:
    """Delete a case; the results of runs that had it stay (without it)."""
    _own(case)
    case.delete()


def cases_import(*, dataset: Dataset, data: bytes, filename: str) -> ImportResult:
    """Cases read from a CSV or JSONL file (evals.io) added at the end of `dataset`, all or none: when any line has
    a problem, nothing is stored and the problems (line and field) are returned."""
    _own(dataset)
    drafts, problems = parse_cases(data, filename)
    if problems:
        return ImportResult(created=0, problems=problems)
    with transaction.atomic():
        # Lock the dataset so two imports do not take the same positions.
        Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
        start = _next_position(dataset)
        Case.objects.bulk_create(
            [
                Case(
                    tenant_id=dataset.tenant_id,
                    dataset=dataset,
                    position=start + index,
                    title=draft.title,
                    turns=draft.turns,
                    expectations=draft.expectations,
                    source=CaseSource.IMPORT,
                )
                for index, draft in enumerate(drafts)
            ]
        )
    return ImportResult(created=len(drafts))


def _feedback_turns(reply: Message) -> list[str]:
    """The user's messages before the rated reply, the newest FEEDBACK_TURNS of them, oldest first."""
    texts = (
        Message.objects.filter(conversation_id=reply.conversation_id, role=Role.USER, id__lt=reply.pk)
        .exclude(content="")
        .order_by("-id")
        .values_list("content", flat=True)[:FEEDBACK_TURNS]
    )
    return [text[:MAX_TURN_CHARS] for text in reversed(list(texts))]


def feedback_rubric(feedback: Feedback) -> str:
    """What a case made from a 👎 expects: the rater's comment, else a better reply than the rated one, quoted."""
    comment = (feedback.comment or "").strip()
    if comment:
        return comment
    rated = " ".join(feedback.message.content.split())[:500]
    return _("A better reply than the one rated 👎: “%(reply)s”") % {"reply": rated}


def feedback_dataset(*, agent: Agent, user: Any = None) -> Dataset:
    """The agent's dataset of cases made from 👎 replies (FEEDBACK_DATASET_NAME), created on first use."""
    found = Dataset.objects.filter(agent=agent, name=FEEDBACK_DATASET_NAME).first()
    if found is not None:
        return found
    try:
        return dataset_create(agent=agent, name=FEEDBACK_DATASET_NAME, user=user,
                              description=_("Cases made from replies rated 👎."))  # fmt: skip
    except ValidationError:
        return Dataset.objects.get(agent=agent, name=FEEDBACK_DATASET_NAME)  # made meanwhile by another click


@transaction.atomic
def case_from_feedback(*, feedback: Feedback, user: Any, dataset: Dataset | None = None) -> Case:
    """A case made from a 👎 rating: the user's turns up to the rated reply, a rubric from the comment. Made once per
    rating: a second call returns the same case. ValidationError for a 👍, or a `dataset` of another agent."""
    _own(feedback)
    # Lock the rating so that two clicks make one case.
    Feedback.objects.select_for_update().filter(pk=feedback.pk).first()
    existing = Case.objects.filter(feedback=feedback).order_by("id").first()
    if existing is not None:
        return existing
    if feedback.rating != -1:
        raise ValidationError({"feedback": _("Only a reply rated 👎 can become an evaluation case.")})
    reply = feedback.message
    agent = reply.conversation.agent
    if dataset is None:
        dataset = feedback_dataset(agent=agent, user=user)
    _own(dataset)
    if dataset.agent_id != agent.pk:
        raise ValidationError({"dataset": _("This dataset belongs to another agent than the rated reply's.")})
    turns = _feedback_turns(reply)
    if not turns:
        raise ValidationError({"feedback": _("The rated reply answers no user message: there is nothing to replay.")})
    title = "👎 " + " ".join(turns[-1].split())[:80]
    expectation = {"kind": ExpectationKind.RUBRIC.value, "rubric": feedback_rubric(feedback)}
    return case_create(dataset=dataset, turns=turns, expectations=[expectation], title=title,
                       source=CaseSource.FEEDBACK, feedback=feedback)  # fmt: skip


def gate_update(*, agent: Agent, enabled: bool, dataset: Dataset | None, threshold: float) -> Gate:
    """Set the agent's publish gate: on or off, the dataset its runs are on, the pass rate needed (0 to 1)."""
    _own(agent)
    if dataset is not None:
        _own(dataset)
        if dataset.agent_id != agent.pk:
            raise ValidationError({"dataset": _("The gate's dataset must be one of this agent's.")})
    try:
        threshold = float(threshold)
    except (TypeError, ValueError):
        threshold = -1.0
    if not 0.0 <= threshold <= 1.0:
        raise ValidationError({"threshold": _("The pass rate needed is a number from 0 to 1 (0.8 = 80%).")})
    if enabled and dataset is None:
        raise ValidationError({"dataset": _("Choose the dataset whose run the gate asks for.")})
    gate, _created = Gate.objects.update_or_create(
        tenant_id=agent.tenant_id, agent=agent,
        defaults={"enabled": bool(enabled), "dataset": dataset, "threshold": threshold},
    )  # fmt: skip
    return gate

"""The publish gate (fills agents.publishgate's slot): when an agent's gate is on, Publish needs a finished run of
the draft as it is now (the run's snapshot equals agent.snapshot()) on the gate's dataset, whose pass rate reaches
the threshold and is not below the published version's latest run on the same dataset. The decision's record is
kept on the new version (AgentVersion.gate)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Agent
from agents.publishgate import GateDecision
from evals.models import Gate, Run, RunStatus

# How many of the draft's latest finished runs are searched for one of the draft as it is now.
DRAFT_RUNS_SEARCHED = 20


class GateOutcome(StrEnum):
    """What the gate decided (the record's `outcome`)."""

    OFF = "off"
    NO_DATASET = "no_dataset"
    NO_RUN = "no_run"
    BELOW_THRESHOLD = "below_threshold"
    BELOW_PUBLISHED = "below_published"
    PASSED = "passed"


def _normal(snapshot: Any) -> str:
    """A snapshot as comparable text (the stored one went through JSON; the draft's did not)."""
    return json.dumps(snapshot, cls=DjangoJSONEncoder, sort_keys=True)


def draft_run(agent: Agent, dataset_id: int) -> Run | None:
    """The latest finished run of `agent`'s draft as it is now on the dataset, or None."""
    current = _normal(agent.snapshot())
    runs = Run.objects.filter(agent=agent, dataset_id=dataset_id, version__isnull=True, status=RunStatus.DONE)
    for run in runs.order_by("-id")[:DRAFT_RUNS_SEARCHED]:
        if _normal(run.snapshot) == current:
            return run
    return None


def _percent(rate: float | None) -> str:
    return "–" if rate is None else f"{rate:.0%}"


def decide(agent: Agent) -> GateDecision:
    """The gate's decision on `agent`'s draft (module docstring)."""
    gate = Gate.objects.select_related("dataset").filter(agent=agent).first()
    if gate is None or not gate.enabled:
        return GateDecision(True, _("The publish gate is off."), {"required": False, "outcome": GateOutcome.OFF})
    record: dict[str, Any] = {"required": True, "threshold": gate.threshold, "decided_at": timezone.now().isoformat()}
    if gate.dataset is None:
        return _refuse(record, GateOutcome.NO_DATASET,
                       _("The publish gate is on but has no dataset: choose one in the gate's settings, or turn it "
                         "off."))  # fmt: skip
    record.update(dataset=gate.dataset.pk, dataset_name=gate.dataset.name)
    run = draft_run(agent, gate.dataset.pk)
    if run is None:
        return _refuse(record, GateOutcome.NO_RUN,
                       _("The publish gate needs a finished run of the draft as it is now on the dataset “%(name)s”: "
                         "run it, then publish.") % {"name": gate.dataset.name})  # fmt: skip
    record.update(run=run.pk, pass_rate=run.pass_rate)
    words = {"rate": _percent(run.pass_rate), "threshold": _percent(gate.threshold), "run": run.pk}
    if (run.pass_rate or 0.0) < gate.threshold:
        return _refuse(record, GateOutcome.BELOW_THRESHOLD,
                       _("The draft passed %(rate)s of the cases (run #%(run)s), under the %(threshold)s the publish "
                         "gate asks for: fix what fails and run it again.") % words)  # fmt: skip
    published = agent.published_version()
    if published is not None:
        before = (
            Run.objects.filter(dataset=gate.dataset, version=published, status=RunStatus.DONE).order_by("-id").first()
        )
        if before is not None:
            record.update(published_version=published.number, published_run=before.pk,
                          published_pass_rate=before.pass_rate)  # fmt: skip
            if (run.pass_rate or 0.0) < (before.pass_rate or 0.0):
                words.update(published=_percent(before.pass_rate), number=published.number)
                return _refuse(record, GateOutcome.BELOW_PUBLISHED,
                               _("The draft passed %(rate)s of the cases (run #%(run)s), below version %(number)s's "
                                 "%(published)s: it would be a step back.") % words)  # fmt: skip
    reason = _("The draft passed %(rate)s of the cases (run #%(run)s).") % words
    record.update(allowed=True, outcome=GateOutcome.PASSED, reason=reason)
    return GateDecision(True, reason, record)


def _refuse(record: dict[str, Any], outcome: GateOutcome, reason: str) -> GateDecision:
    record.update(allowed=False, outcome=outcome, reason=reason)
    return GateDecision(False, reason, record)

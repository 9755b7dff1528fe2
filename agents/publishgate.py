"""The publish gate's slot: what agents.services.agent_publish consults before freezing a draft. The evaluation app
(evals.gate, a floor above) fills it; agents never imports evals.

A gate is a callable `(agent) -> GateDecision`: allowed or not, the words saying why (in the active language), and
the record kept on the new version (AgentVersion.gate) so a version shows what let it through.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from django.utils.translation import gettext as _

from agents.models import Agent
from core.registry import Slot


@dataclass(frozen=True)
class GateDecision:
    """The gate's answer: `allowed`, `reason` (words for the person publishing), `record` (JSON, kept on the
    version when allowed)."""

    allowed: bool
    reason: str
    record: dict[str, Any] = field(default_factory=dict)


class PublishGate(Protocol):
    def __call__(self, agent: Agent) -> GateDecision:
        """Whether `agent`'s draft, as it is now, may be published."""
        ...


class PublishRefused(Exception):
    """The publish gate refused the draft; `message` says why and what to do (the gate's words)."""

    def __init__(self, decision: GateDecision) -> None:
        self.decision = decision
        super().__init__(decision.reason)

    @property
    def message(self) -> str:
        return self.decision.reason


_gate: Slot[PublishGate] = Slot("the publish gate (agents.publishgate)", filled_by="the evals app (evals.apps)")


def register_publish_gate(gate: PublishGate) -> None:
    """Called from the evals app's ready()."""
    _gate.register(gate)


def not_required() -> GateDecision:
    """The decision when the gate is not asked (demo seeding, `agent_publish(gate=False)`)."""
    return GateDecision(True, _("No evaluation was required."), {"required": False, "allowed": True})


def decide(agent: Agent) -> GateDecision:
    """The registered gate's decision on `agent`'s draft."""
    return _gate.get()(agent)

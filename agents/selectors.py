"""Reads of agents."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Max, OuterRef, Subquery

from agents.config import pack_refusals
from agents.models import Agent, AgentKind, AgentVersion
from memory.feedback import feedback_counts
from memory.models import Conversation
from tenants.models import Tenant


@dataclass(frozen=True)
class PlannerAgent:
    """An agent as the planner sees it: its name, and the description and kind of its newest published version."""

    name: str
    description: str
    kind: str


def agent_list_for_planner(*, tenant: Tenant) -> list[PlannerAgent]:
    """The tenant's active, published agents, by name, as their newest published version describes them: a draft
    never reaches the planner, nor a draft's new description or kind. The name is the agent's own (the executor
    finds a step's agent by it). An agent whose version needs a pack the tenant has not enabled (tenants.packs) is
    left out: it could not run. Two queries."""
    newest = AgentVersion.objects.filter(agent=OuterRef("pk")).order_by("-number").values("pk")[:1]
    agents = list(
        Agent.objects.filter(tenant=tenant, active=True)
        .annotate(published_id=Subquery(newest))
        .filter(published_id__isnull=False)
        .only("id", "name")
        .order_by("name")
    )
    versions = AgentVersion.objects.filter(pk__in=[agent.published_id for agent in agents])
    snapshots = dict(versions.values_list("pk", "snapshot"))
    rows = []
    for agent in agents:
        snapshot = snapshots.get(agent.published_id) or {}
        tools, workflow = snapshot.get("tools") or [], snapshot.get("workflow_yaml")
        if pack_refusals(tool_names=tools, workflow_yaml=workflow, tenant=tenant):
            continue
        rows.append(
            PlannerAgent(
                name=agent.name,
                description=str(snapshot.get("description") or ""),
                kind=str(snapshot.get("kind") or AgentKind.CHAT),
            )
        )
    return rows


def agent_get(*, agent_id: int) -> Agent:
    """The scope's agent `agent_id`; Agent.DoesNotExist for another tenant's id (never a leak)."""
    return Agent.objects.get(pk=agent_id)


def agent_list_for_page() -> list[Agent]:
    """The scope's agents for the agents page, each with `published_number` (None while a draft); one query."""
    agents = Agent.objects.select_related("provider").annotate(published_number=Max("versions__number"))
    return list(agents.order_by("name"))


def agent_versions(*, agent: Agent) -> list[AgentVersion]:
    """The agent's published versions, newest first, with who published them."""
    return list(AgentVersion.objects.filter(agent=agent).select_related("published_by").order_by("-number"))


def agent_conversations_of_user(*, agent: Agent, user, limit: int = 20, with_tests: bool = False) -> list[Conversation]:
    """The user's own conversations with the agent, newest first (never another member's, nor a plan step's); test
    conversations of the draft only `with_tests` (for an administrator)."""
    conversations = Conversation.objects.filter(agent=agent, user=user, parent__isnull=True)
    if not with_tests:
        conversations = conversations.filter(is_test=False)
    return list(conversations.order_by("-updated_at")[:limit])


def agent_conversation_count(*, agent: Agent) -> int:
    """How many conversations (of every member) the agent has had."""
    return Conversation.objects.filter(agent=agent).count()


@dataclass(frozen=True)
class FeedbackCount:
    """Thumbs up and down."""

    up: int = 0
    down: int = 0


@dataclass(frozen=True)
class AgentFeedback:
    """The ratings of an agent's replies (the scope's only): all in all, per published version number, and of the
    draft's test conversations (they are in the total, and in no version)."""

    total: FeedbackCount
    by_version: dict[int, FeedbackCount]
    draft: FeedbackCount

    def for_version(self, number: int) -> FeedbackCount:
        return self.by_version.get(number, FeedbackCount())


def agent_feedback(*, agent: Agent) -> AgentFeedback:
    """Thumbs up and down of the agent's replies, from every surface (chat page, widget, API); one query."""
    by_version: dict[int, FeedbackCount] = {}
    draft = FeedbackCount()
    for row in feedback_counts(agent_id=agent.pk):
        count = FeedbackCount(up=row["up"], down=row["down"])
        if row["version"] is None:
            draft = count
        else:
            by_version[row["version"]] = count
    total = FeedbackCount(
        up=draft.up + sum(c.up for c in by_version.values()),
        down=draft.down + sum(c.down for c in by_version.values()),
    )
    return AgentFeedback(total=total, by_version=by_version, draft=draft)

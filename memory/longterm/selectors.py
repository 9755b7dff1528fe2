"""Reads of one user's long-term memory for the memory page: which agents remember them, the events with their
relations and graph, the vector memories, the dreams, a search that changes nothing, and the counts of what
"forget everything" deletes.

Every read takes the user: a member reads their own memory only, and the tenant is the active scope's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from memory.longterm import graph, store
from memory.models import (
    Conversation,
    Dream,
    Entity,
    Event,
    EventActor,
    EventRelation,
    MemoryItem,
    RelationKind,
    TurnMemory,
)

# The page shows the newest rows; older ones are found by search or by choosing one agent.
LIST_LIMIT = 200
GRAPH_LIMIT = 200
SEARCH_TOP_K = 10

_KEY = re.compile(r"^(\d+)_(\d+)(?:_(\d+))?$")


@dataclass(frozen=True)
class MemoryKey:
    """One memory key of a user, as the page names it: an agent's memory of them, or a plan step's."""

    key: str
    agent_id: int | None
    conversation_id: int | None
    label: str

    @property
    def plan_step(self) -> bool:
        return self.conversation_id is not None


def parse_key(key: str) -> tuple[int, int, int | None] | None:
    """(agent id, user id, conversation id or None) of "{agent}_{user}" or "{agent}_{user}_{conversation}"."""
    match = _KEY.match(key or "")
    if match is None:
        return None
    agent, user, conversation = match.groups()
    return int(agent), int(user), int(conversation) if conversation else None


def _agent_names(agent_ids: Iterable[int]) -> dict[int, str]:
    # The agents app is a floor above memory: its rows are reached through the foreign key memory's own Conversation
    # declares by string reference (the one edge from memory up to agents, listed in pyproject.toml's floors contract).
    agent_model = Conversation.agent.field.related_model
    return dict(agent_model.objects.filter(pk__in=set(agent_ids)).values_list("pk", "name"))


def memory_keys(*, user_id: int) -> list[MemoryKey]:
    """The user's memory keys in the active tenant, each with the agent's name; agents' own memories first."""
    keys: set[str] = set()
    for model in (Event, MemoryItem, Dream, TurnMemory):
        keys.update(model.objects.filter(user_id=user_id).order_by().values_list("key", flat=True).distinct())
    parsed = {key: parse_key(key) for key in keys}
    names = _agent_names(found[0] for found in parsed.values() if found)
    result = []
    for key, found in parsed.items():
        if found is None:
            result.append(MemoryKey(key=key, agent_id=None, conversation_id=None, label=key))
            continue
        agent_id, _user, conversation_id = found
        name = names.get(agent_id) or _("Agent %(id)s (deleted)") % {"id": agent_id}
        if conversation_id is not None:
            label = _("%(agent)s · a plan step's memory (conversation %(conversation)s)") % {
                "agent": name,
                "conversation": conversation_id,
            }
        else:
            label = name
        result.append(MemoryKey(key=key, agent_id=agent_id, conversation_id=conversation_id, label=label))
    return sorted(result, key=lambda item: (item.plan_step, item.label.casefold(), item.key))


def _owned(model, *, user_id: int, key: str | None):
    rows = model.objects.filter(user_id=user_id)
    return rows.filter(key=key) if key else rows


def events_for_page(*, user_id: int, key: str | None = None, limit: int = LIST_LIMIT) -> tuple[list[Event], int]:
    """The user's newest `limit` events (of one key, or all), newest first, with what they were superseded by;
    and how many there are in all."""
    rows = _owned(Event, user_id=user_id, key=key)
    events = list(
        rows.select_related("superseded_by")
        .defer("embedding", "terms", "superseded_by__embedding", "superseded_by__terms")
        .order_by("-timestamp", "-id")[:limit]
    )
    total = len(events) if len(events) < limit else rows.count()
    return events, total


def relations_among(events: Sequence[Event]) -> list[EventRelation]:
    """The relations whose two ends are both among `events`."""
    ids = [event.pk for event in events]
    if not ids:
        return []
    return list(EventRelation.objects.filter(source_id__in=ids, target_id__in=ids).order_by("id"))


def memory_items_for_page(
    *, user_id: int, key: str | None = None, limit: int = LIST_LIMIT
) -> tuple[list[MemoryItem], int]:
    """The user's newest `limit` vector memories (by last write or recall) and how many there are in all."""
    rows = _owned(MemoryItem, user_id=user_id, key=key)
    items = list(rows.defer("embedding", "terms").order_by("-time", "-id")[:limit])
    total = len(items) if len(items) < limit else rows.count()
    return items, total


def dreams_for_page(*, user_id: int, key: str | None = None, limit: int = 20) -> list[Dream]:
    return list(_owned(Dream, user_id=user_id, key=key).order_by("-created_at", "-id")[:limit])


def event_graph(events: Sequence[Event], relations: Sequence[EventRelation]) -> graph.Layout:
    """The picture of `events` (the newest GRAPH_LIMIT of them) and their relations, labelled in the active
    language."""
    shown = sorted(events, key=lambda event: (event.timestamp, event.pk))[-GRAPH_LIMIT:]
    kinds = dict(RelationKind.choices)
    nodes = [
        graph.GraphEvent(
            pk=event.pk,
            event_id=event.event_id,
            timestamp=event.timestamp,
            actor=event.actor,
            summary=event.content_summary,
            caption=f"{timezone.localtime(event.timestamp):%m-%d %H:%M} · {event.action_label}",
            status=event.status,
            superseded_by=event.superseded_by_id,
        )
        for event in shown
    ]
    edges = [
        graph.GraphRelation(relation.source_id, relation.target_id, relation.kind, str(kinds.get(relation.kind, "")))
        for relation in relations
    ]
    return graph.layout(
        nodes,
        edges,
        lane_labels={value: str(label).capitalize() for value, label in EventActor.choices},
        superseded_label=_("superseded by"),
    )


@dataclass(frozen=True)
class SearchResult:
    events: list[tuple[Event, float]]
    memories: list[tuple[MemoryItem, float]]


def memory_search(
    *, tenant_id: int, user_id: int, query: str, key: str | None = None, top_k: int = SEARCH_TOP_K
) -> SearchResult:
    """The user's events and vector memories best matching `query` (hybrid ranking), best first. Reads only:
    unlike strength.recall, a search changes no memory's level or recall time."""
    owner = {"tenant_id": tenant_id, "user_id": user_id, **({"key": key} if key else {})}
    found: dict[str, list] = {}
    for name, model in (("events", Event), ("memories", MemoryItem)):
        ranked = store.rank(model, query, top_k=top_k, **owner)
        rows = model.objects.filter(user_id=user_id, id__in=[pk for pk, _score in ranked]).defer("embedding")
        if model is Event:
            rows = rows.select_related("superseded_by")
        by_id = {row.pk: row for row in rows}
        found[name] = [(by_id[pk], score) for pk, score in ranked if pk in by_id]
    return SearchResult(events=found["events"], memories=found["memories"])


def event_get(*, user_id: int, event_id: int) -> Event:
    """The user's event `event_id` in the active tenant; Event.DoesNotExist for anyone else's."""
    return Event.objects.select_related("superseded_by").defer("embedding").get(pk=event_id, user_id=user_id)


def memory_item_get(*, user_id: int, item_id: int) -> MemoryItem:
    """The user's vector memory `item_id` in the active tenant; MemoryItem.DoesNotExist for anyone else's."""
    return MemoryItem.objects.defer("embedding").get(pk=item_id, user_id=user_id)


def event_relation_count(*, event: Event) -> int:
    return EventRelation.objects.filter(Q(source=event) | Q(target=event)).count()


def memory_counts(*, user_id: int) -> dict[str, int]:
    """How many rows of each kind the user's memory holds in the active tenant (what forgetting deletes)."""
    return {
        "events": Event.objects.filter(user_id=user_id).count(),
        "relations": EventRelation.objects.filter(Q(source__user_id=user_id) | Q(target__user_id=user_id)).count(),
        "entities": Entity.objects.filter(user_id=user_id).count(),
        "memories": MemoryItem.objects.filter(user_id=user_id).count(),
        "turns": TurnMemory.objects.filter(user_id=user_id).count(),
        "dreams": Dream.objects.filter(user_id=user_id).count(),
    }

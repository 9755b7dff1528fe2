"""Retrieval along the event graph: the events for a query, the ones reached from them along relations, and the
timeline lines a turn is given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Q
from django.utils import timezone

from llm.tokens import count_text
from memory.longterm import store
from memory.longterm.strength import Owner
from memory.models import Event, EventRelation, EventStatus, RelationKind

# Walking the graph: which relations are followed first (a "why" is answered by causes).
RELATION_ORDER = (RelationKind.CAUSES, RelationKind.RESOLVES, RelationKind.REFERS_TO, RelationKind.FOLLOWS)

# Choosing what a query recalls (measured on conversations by bench/memory_recall.py):
# - an event's score is its hybrid relevance plus a share of the relevance of the event it follows: ANSWER_SHARE
#   when that one is a question (action "query": the event is most often its answer, which rarely repeats the
#   question's words), FOLLOW_SHARE otherwise;
# - the seeds are the best `top_k` of the POOL most relevant events and of the events that follow them;
# - an event reached from a seed along relations carries HOP_SHARE of the seed's score per hop (times the
#   relation's KIND_SHARE: a shared entity name says less than a cause); reached events and the next candidates of
#   the pool then compete for the room left by their own score plus what they carry;
# - from one hop to the next the walk carries on at most `limit` * BEAM events (the reads stay bounded).
POOL = 30
ANSWER_SHARE = 1.0
FOLLOW_SHARE = 0.4
HOP_SHARE = 0.5
KIND_SHARE = {RelationKind.REFERS_TO: 0.5}
BEAM = 2
# Events the walk may add beyond the retrieved ones (along causes first); the timeline's budget decides what shows.
WALK_ROOM = 4


@dataclass(frozen=True)
class Walked:
    """Events for a query: the ones retrieved, then the ones reached along relations (with how)."""

    events: list[Event]
    relations: list[EventRelation]
    retrieved_ids: list[int]


@dataclass(frozen=True)
class _Link:
    pk: int
    source: int
    target: int
    kind: str
    target_action: str


class _Graph:
    """The relations a walk has read, by event: each event's relations are read once, a step's in one query."""

    FIELDS = ("id", "source_id", "target_id", "kind", "target__action_type")

    def __init__(self) -> None:
        self.links: dict[int, _Link] = {}
        self.by_event: dict[int, list[_Link]] = {}
        self.read: set[int] = set()

    def around(self, ids: Sequence[int]) -> list[_Link]:
        """The relations touching `ids` (either end)."""
        missing = [pk for pk in dict.fromkeys(ids) if pk not in self.read]
        if missing:
            touching = Q(source_id__in=missing) | Q(target_id__in=missing)  # PostgreSQL: a BitmapOr of the two indexes
            rows = EventRelation.objects.filter(touching).values_list(*self.FIELDS)
            for row in rows:
                link = _Link(*row)
                if link.pk not in self.links:
                    self.links[link.pk] = link
                    self.by_event.setdefault(link.source, []).append(link)
                    self.by_event.setdefault(link.target, []).append(link)
            self.read.update(missing)
        found = {link.pk: link for pk in ids for link in self.by_event.get(pk, ())}
        return sorted(found.values(), key=lambda link: link.pk)

    def previous(self, pk: int) -> tuple[int, str] | None:
        """(the event `pk` follows, its action), when the walk has read that relation."""
        for link in self.by_event.get(pk, ()):
            if link.kind == RelationKind.FOLLOWS and link.source == pk:
                return link.target, link.target_action
        return None


class _Scores:
    """Events' scores for one query: relevance (store.Scored) plus a share of the event each one follows."""

    def __init__(self, scored: store.Scored | None, graph: _Graph) -> None:
        self.scored = scored
        self.graph = graph
        self.score: dict[int, float] = {}

    def relevance(self, ids: Sequence[int]) -> dict[int, float]:
        if self.scored is None:
            return dict.fromkeys(ids, 0.0)
        return dict(zip(ids, self.scored.of(ids), strict=True))

    def of(self, ids: Sequence[int]) -> dict[int, float]:
        wanted = [pk for pk in dict.fromkeys(ids) if pk not in self.score]
        previous = {pk: found for pk in wanted if (found := self.graph.previous(pk)) is not None}
        relevance = self.relevance(list(dict.fromkeys([*wanted, *(earlier for earlier, _ in previous.values())])))
        for pk in wanted:
            gained = 0.0
            if pk in previous:
                earlier, action = previous[pk]
                gained = (ANSWER_SHARE if action == "query" else FOLLOW_SHARE) * max(relevance[earlier], 0.0)
            self.score[pk] = relevance[pk] + gained
        return {pk: self.score[pk] for pk in ids}

    def ranked(self, top_k: int) -> list[int]:
        """The candidates of the query: the POOL most relevant events and the events that follow them, best first
        (reads the relations of the pool)."""
        if self.scored is None:
            return []
        pool = [pk for pk, _ in self.scored.top(max(POOL, top_k))]
        inside = set(pool)
        after = [
            link.source
            for link in self.graph.around(pool)
            if link.kind == RelationKind.FOLLOWS and link.target in inside and link.source not in inside
        ]
        score = self.of([*pool, *after])
        return sorted(score, key=lambda pk: (-score[pk], pk))


def events_walk(
    owner: Owner,
    query: str,
    *,
    top_k: int,
    depth: int,
    limit: int | None = None,
    retrieved: Sequence[int] | None = None,
) -> Walked:
    """The `top_k` events for `query` (hybrid relevance, raised for an event that follows a relevant one), then up
    to `limit` events in all (default: WALK_ROOM more than `top_k`): the events reached from them along relations
    breadth-first up to `depth` hops (both directions) and the next candidates, by their own score plus what they
    carry from a seed (see above; ties: nearer hops, then causes, resolves, refers_to, follows)."""
    query = (query or "").strip()
    limit = top_k + WALK_ROOM if limit is None else limit
    graph = _Graph()
    scores = _Scores(store.scored(Event, query, user_id=owner.user_id, key=owner.key) if query else None, graph)
    ranked = scores.ranked(top_k)
    if retrieved is None:
        retrieved = ranked[:top_k]
    seeds: list[int] = list(dict.fromkeys(retrieved))[:limit]
    priority = {kind: number for number, kind in enumerate(RELATION_ORDER)}
    carried = {pk: max(score, 0.0) for pk, score in scores.of(seeds).items()}
    reached: dict[int, tuple[int, int]] = {}  # event -> (hop, best relation priority), for the non-seeds
    frontier = list(seeds)
    for hop in range(1, depth + 1):
        if not frontier or len(seeds) >= limit:
            break
        here = set(frontier)
        new: list[int] = []
        for link in graph.around(frontier):
            share = HOP_SHARE * KIND_SHARE.get(link.kind, 1.0)
            for near, other in ((link.source, link.target), (link.target, link.source)):
                if near not in here or other in seeds or (other in reached and reached[other][0] < hop):
                    continue
                rank = priority.get(link.kind, 9)
                if other not in reached:
                    new.append(other)
                reached[other] = (hop, min(rank, reached.get(other, (hop, rank))[1]))
                carried[other] = max(carried.get(other, 0.0), carried[near] * share)
        if len(new) > limit * BEAM:  # only the most promising of this hop walk on
            relevance = scores.relevance(new)
            new = sorted(new, key=lambda pk: (-(relevance[pk] + carried[pk]), reached[pk][1], -pk))[: limit * BEAM]
        frontier = new
    taken = set(seeds)
    after_seeds = [pk for pk in ranked if pk not in taken and scores.score[pk] > 0] if depth > 0 else []
    others = list(dict.fromkeys([*reached, *after_seeds]))
    total = {pk: score + carried.get(pk, 0.0) for pk, score in scores.of(others).items()}
    beyond = (depth + 1, 9)
    chosen = seeds + sorted(others, key=lambda pk: (-total[pk], *reached.get(pk, beyond), -pk))[: limit - len(seeds)]
    inside = set(chosen)
    edges = [
        EventRelation(pk=link.pk, source_id=link.source, target_id=link.target, kind=link.kind)
        for link in graph.links.values()
        if link.source in inside and link.target in inside
    ]
    rows = (
        Event.objects.filter(id__in=chosen)
        .select_related("superseded_by")
        .defer("terms", "embedding", "superseded_by__terms", "superseded_by__embedding")
    )
    found = {event.pk: event for event in rows}
    events = [found[pk] for pk in chosen if pk in found]
    return Walked(events=events, relations=edges, retrieved_ids=list(retrieved))


def timeline(walked: Walked, *, budget_tokens: int, model: str = "gpt-4") -> tuple[list[str], list[Event]]:
    """The walked events as compact timeline lines (oldest first) within `budget_tokens`; the retrieved events are
    kept first when the budget cuts. Returns the lines and the events they show."""
    outgoing: dict[int, list[str]] = {}
    ids = {event.pk: event.event_id for event in walked.events}
    for relation in walked.relations:
        outgoing.setdefault(relation.source_id, []).append(f"{relation.kind} → {ids.get(relation.target_id, '?')}")
    order = {pk: number for number, pk in enumerate(walked.retrieved_ids)}
    by_importance = sorted(walked.events, key=lambda event: order.get(event.pk, len(order)))
    chosen, used = [], 0
    for event in by_importance:
        line = _line(event, outgoing.get(event.pk, []))
        cost = count_text(line, model) + 2
        if used + cost > budget_tokens:
            continue
        chosen.append((event, line))
        used += cost
    chosen.sort(key=lambda pair: (pair[0].timestamp, pair[0].pk))
    return [line for _, line in chosen], [event for event, _ in chosen]


def _line(event: Event, links: list[str]) -> str:
    when = timezone.localtime(event.timestamp).strftime("%Y-%m-%d %H:%M")
    text = f"{when} [{event.event_id}] {event.actor}/{event.action_type}: {event.content_summary}"
    if event.status != EventStatus.COMPLETED:
        text += f" ({event.status})"
    if event.superseded_by_id:
        text += f" (superseded by {event.superseded_by.event_id if event.superseded_by else '?'})"
    if links:
        text += " {" + "; ".join(links) + "}"
    return text

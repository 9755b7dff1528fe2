"""Retrieval along the event graph: the events for a query, the ones reached from them along relations, fused into
one ranking (a reached event can displace a weaker direct hit). The lines a turn is given are built from them by
memory.longterm.events.passages."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from django.db.models import Case, CharField, OuterRef, Q, Subquery, Value, When
from django.utils import timezone

from memory.longterm import store
from memory.longterm.events import when
from memory.longterm.strength import Owner
from memory.models import Entity, Event, EventRelation, RelationKind

# Walking the graph: which relations are followed first (a "why" is answered by causes).
RELATION_ORDER = (RelationKind.CAUSES, RelationKind.RESOLVES, RelationKind.REFERS_TO, RelationKind.FOLLOWS)

# Choosing what a query recalls (bench/memory_recall.py, LoCoMo; "split" says which half of the dev data chose a
# value: conv-26 or conv-30, checked on the other; "issue 14" values were chosen on both together, before the split
# discipline, and were re-checked on each half for issue 30):
# - an event's score is its hybrid relevance plus a share of the relevance of the event it follows: ANSWER_SHARE
#   when that one is a question (action "query": the event is most often its answer, which rarely repeats the
#   question's words), FOLLOW_SHARE otherwise;
# - a query that names a time ("last May", "in 2022", 去年) adds TIME_SHARE to the events that speak of that time
#   (their DATE entities) or were said in it, and the best POOL of those join the candidates;
# - the seeds are the best `top_k` of the POOL most relevant events and of the events that follow them;
# - an event reached along relations gains HOP_SHARE of the relevance of the event it was reached from, per hop
#   (times REFERS_SHARE for a shared entity name, NEIGHBOUR_SHARE for a neighbouring turn; a seed linked to another
#   seed gains SEED_SHARE of that); every candidate (seed, reached, next in the pool) is then ranked by its own
#   score plus that gain, so a reached event displaces a weaker direct hit when its relation and its own score
#   justify it;
# - from one hop to the next the walk carries on at most `limit` * BEAM events (the reads stay bounded).
# The --tune runs behind each value are in docs/memory.md (Figures).
POOL = 30  # issue 14; split: 20 and 50 change nothing on either half
ANSWER_SHARE = 1.0  # issue 14; split: each half keeps 1.0 (0 and 0.5 lose on both)
FOLLOW_SHARE = 0.4  # issue 14; split: conv-26 chose 0.2, which loses on conv-30; conv-30 keeps 0.4
TIME_SHARE = 1.0  # split: conv-30 chose 1.0 and it beats 0 (no time boost) on conv-26; conv-26's 2.0 ties on conv-30
HOP_SHARE = 0.3  # split: chosen on conv-30, beats 0.5 on conv-26 (conv-26's own choice, 0.1, beats 0.5 on conv-30)
SEED_SHARE = 1.0  # what a seed gains from a seed it is linked to, times HOP_SHARE; split: conv-30 keeps 1.0
REFERS_SHARE = 0.5  # issue 14: a shared entity name; split: conv-26 chose 0, which loses on conv-30
NEIGHBOUR_SHARE = 1.0  # a `follows` neighbour; split: conv-26 chose 0.5, which loses on conv-30
BEAM = 2
# A seed gains from a neighbouring seed (`follows`) SEED_NEIGHBOUR_SHARE x SEED_SHARE: 0, as its score already
# holds ANSWER_SHARE / FOLLOW_SHARE of the one before it (counting it twice lets a run of adjacent hits, one session,
# push out a lone hit of another session). Split (with LONE_SESSION 1): chosen on conv-30 (recall@10 0.780 vs 0.765
# with 1.0); on conv-26 a tie (recall@10 and multi-hop all@10 equal), shown - hybrid +0.014 there.
SEED_NEIGHBOUR_SHARE = 0.0
# A walked event enters the top_k by displacing the weakest seed, except a seed whose conversation (session) has at
# most LONE_SESSION events among the fused top_k: multi-hop evidence lies in several sessions, and what the walk
# brings is mostly a neighbouring turn of a hit, in a session already there. Split: chosen on conv-26 (multi-hop all@10
# 0.250 -> 0.344, the walk-off figure; recall@10 0.818 -> 0.808); on conv-30 recall@10 and multi-hop all@10
# unchanged (a tie, not a win: conv-30 had no multi-hop loss to recover); 2 loses recall@10 on both halves.
# 0: the fused order alone.
LONE_SESSION = 1
# Events the walk may add beyond the `top_k` (what the reply's budget decides to show comes from all of them).
WALK_ROOM = 4
# A message that speaks of the user ("which instrument do I play?", 我喜欢什么？) and does not ask what the assistant
# said ("what did you recommend to me?", 你给我推荐过什么？) is about the user's own facts: the assistant's events
# (which repeat and elaborate the user's words at length) weigh ASSISTANT_PENALTY less (fused-score units, about
# standard deviations). Issue 38 (docs/memory.md "The user's own words"): chosen on the dev halves of ualong-en-topic
# (2.0: 0.719 -> 0.875; 1.0 no gain, 4.0 0.859), MemoryBank-en (+0.010) and MemoryBank-zh (-0.007); checked on
# their check halves (topic 0.732 -> 0.893, MemoryBank unchanged); LoCoMo's questions name third persons, unchanged.
ASSISTANT_PENALTY = 2.0
_ABOUT_ME = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll)\b|我(?!们)", re.IGNORECASE)
_WHAT_YOU_SAID = re.compile(
    r"\byou\s+(?:have\s+|had\s+|once\s+|ever\s+|just\s+|also\s+)*"
    r"(?:recommended|suggested|said|told|mentioned|advised|gave|given|proposed|introduced|shared)\b"
    r"|\b(?:did|have|had)\s+you\s+(?:ever\s+|once\s+)?"
    r"(?:recommend|suggest|say|said|tell|told|mention|advis|give|given|propos|introduc|shar)\w*"
    r"|[你您](?:曾经|之前|上次|以前|当时|还)?(?:给我|跟我|对我|向我|帮我|和我)?(?:推荐|建议|说过|提到|告诉|介绍|讲过)",
    re.IGNORECASE,
)


def about_the_user(message: str) -> bool:
    """Whether `message` speaks of the user (first person singular) without asking what the assistant said."""
    return bool(_ABOUT_ME.search(message)) and not _WHAT_YOU_SAID.search(message)


@dataclass(frozen=True)
class Walked:
    """Events for a query: the ones retrieved, then the ones reached along relations (with how)."""

    events: list[Event]
    relations: list[EventRelation]
    retrieved_ids: list[int]
    query: str = ""  # what they were found for (the passages cut each event around it)


class _Link(NamedTuple):  # a tuple: a walk reads hundreds of them per recall, and a tuple is made fastest
    pk: int
    source: int
    target: int
    kind: str
    target_action: str


class _Graph:
    """The relations a walk has read, by event: each event's relations are read once, a step's in one query."""

    FIELDS = ("id", "source_id", "target_id", "kind", "target_action")

    # The action of a `follows` link's target (what `previous` needs), looked up by primary key per such row. A join
    # to the events instead lets PostgreSQL hash the owner's whole event table once the id lists grow (a question
    # naming a time: 60 ids, 15 ms against 4 ms at 10,000 events).
    @staticmethod
    def target_action() -> Case:
        action = Event.objects.filter(pk=OuterRef("target_id")).values("action_type")[:1]
        return Case(When(kind=RelationKind.FOLLOWS, then=Subquery(action)), default=Value(""), output_field=CharField())

    def __init__(self) -> None:
        self.links: dict[int, _Link] = {}
        self.by_event: dict[int, list[_Link]] = {}
        self.read: set[int] = set()

    def around(self, ids: Sequence[int]) -> list[_Link]:
        """The relations touching `ids` (either end)."""
        missing = [pk for pk in dict.fromkeys(ids) if pk not in self.read]
        if missing:

            def read() -> list[tuple]:
                touching = Q(source_id__in=missing) | Q(target_id__in=missing)  # PostgreSQL: a BitmapOr of the two
                rows = EventRelation.objects.filter(touching).annotate(target_action=self.target_action())
                return list(rows.values_list(*self.FIELDS))

            # Built and compiled once per number of ids (and tenant scope): the statement stays, the ids change.
            key = (*store.scope_key(EventRelation), "around", len(missing))
            for row in store.repeated(EventRelation, key, read, variable=[*missing, *missing]):
                link = _Link._make(row)
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

    def __init__(self, scored: store.Scored | None, graph: _Graph, timed: frozenset[int] = frozenset()) -> None:
        self.scored = scored
        self.graph = graph
        self.timed = timed
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
            self.score[pk] = relevance[pk] + gained + (TIME_SHARE if pk in self.timed else 0.0)
        return {pk: self.score[pk] for pk in ids}

    def ranked(self, top_k: int) -> list[int]:
        """The candidates of the query: the POOL most relevant events and the events that follow them, best first
        (reads the relations of the pool)."""
        if self.scored is None:
            return []
        pool = [pk for pk, _ in self.scored.top(max(POOL, top_k))]
        if self.timed:
            timed = np.fromiter(self.timed, dtype=np.int64, count=len(self.timed))
            relevance = np.asarray(self.scored.of(timed))
            best = timed[np.lexsort((timed, -relevance))[:POOL]]  # the most relevant first, then the lower id
            pool = list(dict.fromkeys([*pool, *best.tolist()]))
        inside = set(pool)
        after = [
            link.source
            for link in self.graph.around(pool)
            if link.kind == RelationKind.FOLLOWS and link.target in inside and link.source not in inside
        ]
        score = self.of([*pool, *after])
        return sorted(score, key=lambda pk: (-score[pk], pk))


def timed_events(owner: Owner, query: str, now: dt.datetime | None = None) -> frozenset[int]:
    """The owner's events that speak of a time the query names (their DATE entities) or were said in it (none
    when the query names no time; `now` is when the query is asked)."""
    now = timezone.localtime(now or timezone.now())
    periods = when.resolve(query, now)
    if not periods:
        return frozenset()
    dates = Entity.objects.filter(user_id=owner.user_id, key=owner.key, type=when.DATE_TYPE).values_list("id", "name")
    matching = [
        pk for pk, name in dates if (period := when.Period.parse(name)) and any(period.overlaps(p) for p in periods)
    ]
    said = Q()
    zone = timezone.get_current_timezone()
    for period in periods:
        start = dt.datetime.combine(period.start, dt.time.min, tzinfo=zone)
        said |= Q(timestamp__gte=start, timestamp__lt=start + dt.timedelta(days=(period.end - period.start).days + 1))
    # One statement, two index reads: the events said in the periods (the owner's time index) and the events linked
    # to the matching DATE entities (the owner's own entities, so their events are the owner's).
    found = Event.objects.filter(said, user_id=owner.user_id, key=owner.key).order_by().values_list("id", flat=True)
    if matching:
        linked = Entity.events.through.objects.filter(entity_id__in=matching).order_by().values_list("event_id")
        found = found.union(linked)
    return frozenset(found)


def _kind_share(kind: str) -> float:
    return REFERS_SHARE if kind == RelationKind.REFERS_TO else NEIGHBOUR_SHARE if kind == RelationKind.FOLLOWS else 1.0


def _walk(graph: _Graph, scores: _Scores, seeds: list[int], depth: int, limit: int) -> tuple[dict, dict]:
    """Breadth-first from the seeds up to `depth` hops: each event's gain (the best share it is carried from a
    neighbour) and, for the events that are not seeds, (hop, best relation priority)."""
    priority = {kind: number for number, kind in enumerate(RELATION_ORDER)}
    carried = {pk: max(score, 0.0) for pk, score in scores.relevance(seeds).items()}  # own relevance only
    gain: dict[int, float] = {}
    reached: dict[int, tuple[int, int]] = {}
    frontier = list(seeds)
    for hop in range(1, depth + 1):
        if not frontier:
            break
        here = set(frontier)
        new: list[int] = []
        for link in graph.around(frontier):
            share = HOP_SHARE * _kind_share(link.kind)
            for near, other in ((link.source, link.target), (link.target, link.source)):
                seed = other in carried and other not in reached
                neighbours = link.kind == RelationKind.FOLLOWS and seed
                if near not in here or (other in reached and reached[other][0] < hop) or (seed and hop > 1):
                    continue
                seed_share = SEED_SHARE * (SEED_NEIGHBOUR_SHARE if neighbours else 1.0) if seed else 1.0
                gain[other] = max(gain.get(other, 0.0), carried[near] * share * seed_share)
                if seed:  # a seed linked to another seed gains from it; the walk does not go on from it again
                    continue
                rank = priority.get(link.kind, 9)
                if other not in reached:
                    new.append(other)
                reached[other] = (hop, min(rank, reached.get(other, (hop, rank))[1]))
                carried[other] = gain[other]
        if len(new) > limit * BEAM:  # only the most promising of this hop walk on
            relevance = scores.relevance(new)
            new = sorted(new, key=lambda pk: (-(relevance[pk] + gain[pk]), reached[pk][1], -pk))[: limit * BEAM]
        frontier = new
    return gain, reached


def events_walk(
    owner: Owner,
    query: str,
    *,
    top_k: int,
    depth: int,
    limit: int | None = None,
    retrieved: Sequence[int] | None = None,
    now: dt.datetime | None = None,
) -> Walked:
    """Up to `limit` events (default: WALK_ROOM more than `top_k`) for `query`, best first: the `top_k` best
    candidates (hybrid relevance, raised for an event that follows a relevant one or speaks of a time the query
    names) are the seeds of a breadth-first walk along relations up to `depth` hops (both directions); then
    seeds, reached events and the next candidates are ranked together by their own score plus what the walk gave
    them (see above; ties: nearer hops, then causes, resolves, refers_to, follows). `retrieved` fixes the seeds
    instead, and they are kept first. `retrieved_ids` of the result are its first `top_k` (the recalled set)."""
    query = (query or "").strip()
    limit = top_k + WALK_ROOM if limit is None else limit
    graph = _Graph()
    relevance = store.scored(Event, query, user_id=owner.user_id, key=owner.key) if query else None
    if relevance is not None and about_the_user(query):
        relevance = relevance.lowered(ASSISTANT_PENALTY)  # the assistant's events (Event.collection_marked)
    scores = _Scores(relevance, graph, timed_events(owner, query, now) if query else frozenset())
    ranked = scores.ranked(top_k)
    fixed = retrieved is not None
    seeds: list[int] = list(dict.fromkeys(retrieved if fixed else ranked[:top_k]))[:limit]
    gain, reached = _walk(graph, scores, seeds, depth, limit)
    candidates = list(dict.fromkeys([*seeds, *reached, *(pk for pk in ranked if scores.score[pk] > 0)]))
    total = {pk: score + gain.get(pk, 0.0) for pk, score in scores.of(candidates).items()}
    beyond = (depth + 1, 9)
    order = sorted(candidates, key=lambda pk: (-total[pk], *reached.get(pk, (0, 0) if pk in seeds else beyond), -pk))
    found: dict[int, Event] = {}
    if LONE_SESSION and not fixed and not set(order[:top_k]) <= set(seeds):
        # The events the choice below can take are among the seeds and the first `limit` of `order`: read once, for
        # their sessions here and for the result after.
        found = _events_read([*seeds, *order[:limit]])
        order = _lone_sessions_kept(order, seeds, top_k, found)
    kept = set(seeds)
    chosen = (seeds + [pk for pk in order if pk not in kept])[:limit] if fixed else order[:limit]
    return replace(_walked(graph, chosen, seeds if fixed else chosen[:top_k], found), query=query)


def _lone_sessions_kept(order: list[int], seeds: list[int], top_k: int, found: dict[int, Event]) -> list[int]:
    """`order` with its first `top_k` holding every seed whose conversation has at most LONE_SESSION events in the
    first `top_k` of `order` (the walked events entering take the places of the weakest other seeds; `found`: the
    events of the seeds and of that head, read)."""
    head = order[:top_k]
    session = {pk: event.conversation_id for pk, event in found.items()}
    per = Counter(session.get(pk) for pk in head)
    kept = {pk for pk in seeds if per[session.get(pk)] <= LONE_SESSION}
    taken = kept | set([pk for pk in order if pk not in kept][: top_k - len(kept)])
    return [pk for pk in order if pk in taken] + [pk for pk in order if pk not in taken]


def _events_read(ids: Sequence[int]) -> dict[int, Event]:
    """The events `ids` by id (one query; their keyword terms and vector are not read)."""
    return Event.objects.defer("terms", "embedding").in_bulk(list(dict.fromkeys(ids)))


def _walked(graph: _Graph, chosen: list[int], retrieved: list[int], found: dict[int, Event]) -> Walked:
    """The result: the `chosen` events (those not in `found` read now) and the relations among them."""
    inside = set(chosen)
    edges = [
        EventRelation(pk=link.pk, source_id=link.source, target_id=link.target, kind=link.kind)
        for link in graph.links.values()
        if link.source in inside and link.target in inside
    ]
    missing = [pk for pk in chosen if pk not in found]
    found = {**found, **_events_read(missing)} if missing else found
    found = {pk: found[pk] for pk in chosen if pk in found}
    # The events that replaced some of them (their ids are shown): rare, so read apart rather than joined every time.
    newer_ids = {event.superseded_by_id for event in found.values() if event.superseded_by_id}
    if newer_ids:
        newer = Event.objects.only("id", "event_id").in_bulk(newer_ids)
        for event in found.values():
            if event.superseded_by_id in newer:
                event.superseded_by = newer[event.superseded_by_id]
    events = [found[pk] for pk in chosen if pk in found]
    return Walked(events=events, relations=edges, retrieved_ids=list(retrieved))

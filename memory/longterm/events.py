"""The event graph of seed 2: events extracted from each turn, typed relations, entities, retrieval along causes.

Extraction (after a turn, off the reply path: memory.tasks.extract_turn_memory) takes one of two ways, an agent
setting:
- `model`: a separate call to the execution-tier model, which answers JSON (EXTRACTION_SCHEMA); the answer is
  validated against the schema, an invalid one is sent back once with the errors (one repair), and a second
  invalid answer is skipped and counted (MemoryMetric.skipped).
- `rules`: no model call (offline): one event per message, entities by part-of-speech (jieba) and capitalised
  names, `follows` the previous event of the conversation, `refers_to` the last event that named the same entity.
  Rules cannot see causes, contradictions or resolutions: those need the model.
Storing dedupes by the normalised summary (the same fact twice is one event), marks events an extraction says are
superseded (with when and by what; never deleted), and merges entities by normalised name and type.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from llm.tokens import count_text
from memory.longterm import store
from memory.longterm.strength import Owner
from memory.models import Entity, Event, EventActor, EventRelation, EventStatus, RelationKind

ACTION_TYPES = ("query", "answer", "report", "clarify", "decision", "execute_tool", "plan", "other")
# Walking the graph: which relations are followed first (a "why" is answered by causes).
RELATION_ORDER = (RelationKind.CAUSES, RelationKind.RESOLVES, RelationKind.REFERS_TO, RelationKind.FOLLOWS)

EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["new_events"],
    "properties": {
        "new_events": {
            "type": "array",
            "maxItems": 8,
            "items": {
                "type": "object",
                "required": ["event_id", "actor", "action_type", "content_summary"],
                "properties": {
                    "event_id": {"type": "string", "minLength": 1, "maxLength": 60},
                    "actor": {"enum": ["user", "assistant", "system"]},
                    "action_type": {"type": "string", "minLength": 1, "maxLength": 40},
                    "content_summary": {"type": "string", "minLength": 1, "maxLength": 600},
                    "entities": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1, "maxLength": 200},
                                "type": {"type": "string", "maxLength": 40},
                            },
                        },
                    },
                    "status": {"enum": ["pending", "completed", "failed"]},
                    "related_event_ids": {"type": "array", "items": {"type": "string"}},
                    "supersedes": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "relations": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["source", "type", "target"],
                "properties": {
                    "source": {"type": "string"},
                    "type": {"enum": [kind.value for kind in RelationKind]},
                    "target": {"type": "string"},
                },
            },
        },
    },
}

_EVENT_FORM = """\
"new_events": [{"event_id": "n1", "actor": "user|assistant|system", "action_type": "query|answer|report|\
clarify|decision|execute_tool|plan|other", "content_summary": "one short sentence in the conversation's \
language", "entities": [{"name": "...", "type": "ORG|PERSON|PLACE|PRODUCT|ORDER|DATE|OTHER"}], "status": \
"pending|completed|failed", "supersedes": ["<id of a known event this one contradicts or replaces>"]}],
 "relations": [{"source": "<id>", "type": "causes|follows|refers_to|resolves", "target": "<id>"}]}"""

_EVENT_RULES = """\
Ids of new events are yours ("n1", "n2"...); known events keep their ids. "A causes B" when A is a reason for B \
(a closed port causes a delay; a delay causes a late order). "A resolves B" when A settles B."""

EXTRACTION_PROMPT = f"""\
You maintain the event graph of a user's long-term memory (seed: event knowledge graph). From the new exchange, \
extract the events worth remembering: facts reported, requests, decisions, outcomes. Skip greetings and small talk. \
Answer with one JSON object only, no prose, of this form:
{{{_EVENT_FORM}
{_EVENT_RULES} Use {{"new_events": []}} when nothing is worth remembering.
你负责维护用户长期记忆的事件图谱：从新的对话中提取值得记住的事件，只输出一个 JSON 对象。"""

# Seed 2's combined answer: the reply and the exchange's events in one model call. The runner streams only
# `user_reply` to the person (agents.replyjson); the extraction validates the rest (one repair, else skipped).
COMBINED_PROMPT = f"""\
Long-term memory: answer every message with one JSON object only, no prose around it, `user_reply` first:
{{"user_reply": "<your reply to the user, as you would write it, in the user's language>", {_EVENT_FORM}
`new_events` are the events of this exchange worth remembering (facts reported, requests, decisions, outcomes; \
none for small talk: []). Known events are listed among the recalled memories, with their ids in brackets.
{_EVENT_RULES}
长期记忆：每次只输出一个 JSON 对象，先写 user_reply（给用户的回复），再写本轮值得记住的事件 new_events。"""


class ExtractionInvalid(ValueError):
    """A model's extraction answer that is not JSON or does not match the schema."""


def parse_extraction(text: str) -> dict[str, Any]:
    """The extraction JSON in a model's answer (a ```json fence or prose around it is tolerated), validated."""
    text = (text or "").strip()
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
    if fenced:
        text = fenced.group(1)
    elif not text.startswith("{"):
        start, end = text.find("{"), text.rfind("}")
        if start >= 0 and end > start:
            text = text[start : end + 1]
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ExtractionInvalid(f"not JSON: {exc}") from None
    errors = sorted(jsonschema.Draft202012Validator(EXTRACTION_SCHEMA).iter_errors(data), key=lambda e: e.path)
    if errors:
        first = errors[0]
        where = "/".join(str(part) for part in first.absolute_path) or "(top)"
        raise ExtractionInvalid(f"{where}: {first.message}")
    return data


# --- rules (offline) ----------------------------------------------------------------------------------------------

_PROPER = {"nr": "PERSON", "ns": "PLACE", "nt": "ORG", "nz": "OTHER", "nrt": "PERSON", "nrfg": "PERSON"}
_LATIN_NAME = re.compile(r"\b[A-Z][a-zA-Z]+(?:\s+[A-Z][a-zA-Z]+)*\b")
_QUESTION = re.compile(
    r"[?？]\s*$|^(what|why|how|when|where|who|which|do|does|did|is|are|can|could)\b|吗|为什么|什么|怎么|如何|哪"
)
_COMMON_CAPITALISED = {
    "I", "The", "A", "An", "It", "This", "That", "What", "Why", "How", "When", "Where", "Who", "Which", "Yes", "No",
    "Hi", "Hey", "Hello", "Thanks", "Thank", "Oh", "Wow", "Well", "So", "And", "But", "Do", "Did", "Are", "Is",
    "Can", "My", "We", "You", "Your", "Our", "They", "He", "She", "That's", "It's", "I'm", "Sure", "Great",
}  # fmt: skip


def rule_entities(text: str) -> list[dict[str, str]]:
    """Names in `text`: jieba's proper nouns, a letter glued to a noun (A港口, 客户C), capitalised English words."""
    import jieba.posseg

    found: dict[str, str] = {}
    words = list(jieba.posseg.cut(text)) if store.normalise(text) and re.search(r"[\u4e00-\u9fff]", text) else []
    for number, pair in enumerate(words):
        word, flag = pair.word, pair.flag
        if flag in _PROPER and len(word) > 1:
            found.setdefault(word, _PROPER[flag])
        if flag in ("eng", "x") and re.fullmatch(r"[A-Za-z0-9]{1,4}", word):
            before = words[number - 1] if number else None
            after = words[number + 1] if number + 1 < len(words) else None
            if after is not None and after.flag.startswith("n"):
                found.setdefault(word + after.word, "OTHER")
            elif before is not None and before.flag.startswith("n"):
                found.setdefault(before.word + word, "OTHER")
    for match in _LATIN_NAME.finditer(text):
        name = match.group(0)
        parts = [part for part in name.split() if part not in _COMMON_CAPITALISED]
        if parts:
            found.setdefault(" ".join(parts), "OTHER")
    return [{"name": name, "type": kind} for name, kind in list(found.items())[:12]]


def rule_event(*, actor: str, text: str) -> dict[str, Any]:
    """One event for one message, without a model."""
    summary = re.sub(r"\s+", " ", text).strip()[:500]
    action = "query" if _QUESTION.search(summary.lower()) else ("report" if actor == EventActor.USER else "answer")
    return {
        "event_id": "n1",
        "actor": actor,
        "action_type": action,
        "content_summary": summary,
        "entities": rule_entities(summary),
        "status": EventStatus.COMPLETED,
    }


# --- storing ------------------------------------------------------------------------------------------------------


def new_event_id(now: dt.datetime) -> str:
    """seed 2's form: evt_20250717103005_abc123."""
    return f"evt_{now:%Y%m%d%H%M%S}_{secrets.token_hex(3)}"


@dataclass
class StoreOutcome:
    added: list[Event] = field(default_factory=list)
    duplicates: int = 0
    superseded: int = 0
    relations: int = 0


def _entity_rows(owner: Owner, entities: Iterable[dict[str, Any]]) -> list[Entity]:
    rows = []
    for entity in entities:
        name = str(entity.get("name") or "").strip()[:200]
        normalized = store.normalise(name)[:200]
        if not normalized:
            continue
        kind = str(entity.get("type") or "").strip().upper()[:40]
        row = Entity.objects.filter(user_id=owner.user_id, key=owner.key, normalized=normalized, type=kind).first()
        if row is None:
            try:
                with transaction.atomic():
                    row = Entity.objects.create(
                        user_id=owner.user_id, key=owner.key, name=name, normalized=normalized, type=kind
                    )
            except IntegrityError:
                row = Entity.objects.get(user_id=owner.user_id, key=owner.key, normalized=normalized, type=kind)
        rows.append(row)
    return rows


def search_text(summary: str, entities: Iterable[dict[str, Any]]) -> str:
    """What an event is found by: its summary and its entities' names."""
    names = " ".join(str(entity.get("name") or "") for entity in entities)
    return f"{summary} {names}".strip()


def events_store(
    owner: Owner,
    extracted: dict[str, Any],
    *,
    conversation_id: int | None = None,
    source_message_ids: Sequence[int] = (),
    now: dt.datetime | None = None,
    link_entities: bool = False,
) -> StoreOutcome:
    """Store a validated extraction: new events (deduplicated), their entities and relations, supersessions.

    `link_entities` (the rules) relates each new event to the last earlier event naming one of its entities."""
    now = now or timezone.now()
    outcome = StoreOutcome()
    local: dict[str, Event] = {}  # the extraction's ids ("n1") and known event ids -> rows
    known_ids = {
        ref
        for item in extracted.get("new_events") or []
        for ref in [*(item.get("supersedes") or []), *(item.get("related_event_ids") or [])]
    } | {ref for relation in extracted.get("relations") or [] for ref in (relation["source"], relation["target"])}
    for row in Event.objects.filter(user_id=owner.user_id, key=owner.key, event_id__in=known_ids):
        local[row.event_id] = row
    previous = (
        Event.objects.filter(user_id=owner.user_id, key=owner.key, conversation_id=conversation_id)
        .order_by("-timestamp", "-id")
        .first()
        if conversation_id
        else None
    )
    pending_relations: list[tuple[Event, str, Event]] = []
    for item in extracted.get("new_events") or []:
        summary = item["content_summary"].strip()
        entities = [e for e in item.get("entities") or [] if str(e.get("name") or "").strip()]
        digest = store.text_hash(summary)
        existing = Event.objects.filter(user_id=owner.user_id, key=owner.key, content_hash=digest).first()
        if existing is not None:
            outcome.duplicates += 1
            local[item["event_id"]] = existing
            continue
        timestamp = now
        try:
            with transaction.atomic():
                event = Event.objects.create(
                    user_id=owner.user_id,
                    key=owner.key,
                    agent_id=owner.agent_id,
                    event_id=new_event_id(timestamp),
                    timestamp=timestamp,
                    actor=item["actor"],
                    action_type=item["action_type"][:40],
                    content_summary=summary,
                    entities=[{"name": str(e["name"])[:200], "type": str(e.get("type") or "")[:40]} for e in entities],
                    status=item.get("status") or EventStatus.COMPLETED,
                    content_hash=digest,
                    conversation_id=conversation_id,
                    source_message_ids=list(source_message_ids),
                    **store.search_fields(search_text(summary, entities)),
                )
        except IntegrityError:  # the same summary stored by a concurrent extraction
            outcome.duplicates += 1
            local[item["event_id"]] = Event.objects.get(user_id=owner.user_id, key=owner.key, content_hash=digest)
            continue
        local[item["event_id"]] = event
        outcome.added.append(event)
        entity_rows = _entity_rows(owner, entities)
        if entity_rows:
            event.entity_rows.add(*entity_rows)
        if link_entities and entity_rows:
            earlier = (
                Event.objects.filter(entity_rows__in=entity_rows, user_id=owner.user_id, key=owner.key)
                .exclude(pk=event.pk)
                .order_by("-timestamp", "-id")
                .distinct()[:3]
            )
            pending_relations += [(event, RelationKind.REFERS_TO, other) for other in earlier]
        for ref in item.get("supersedes") or []:
            old = local.get(ref)
            if old is not None and old.pk != event.pk and old.superseded_by_id is None:
                Event.objects.filter(pk=old.pk).update(superseded_by=event, superseded_at=now)
                outcome.superseded += 1
        for ref in item.get("related_event_ids") or []:
            other = local.get(ref)
            if other is not None:
                pending_relations.append((event, RelationKind.REFERS_TO, other))
        if previous is not None and previous.pk != event.pk:
            pending_relations.append((event, RelationKind.FOLLOWS, previous))
        previous = event
    for relation in extracted.get("relations") or []:
        source, target = local.get(relation["source"]), local.get(relation["target"])
        if source is not None and target is not None and source.pk != target.pk:
            pending_relations.append((source, relation["type"], target))
    outcome.relations = _relations_add(pending_relations)
    return outcome


def _relations_add(relations: Sequence[tuple[Event, str, Event]]) -> int:
    added = 0
    for source, kind, target in relations:
        _, created = EventRelation.objects.get_or_create(source=source, target=target, kind=kind)
        if not created:
            continue
        added += 1
        if target.event_id not in source.related_event_ids:
            source.related_event_ids = [*source.related_event_ids, target.event_id]
            Event.objects.filter(pk=source.pk).update(related_event_ids=source.related_event_ids)
        if kind == RelationKind.RESOLVES:
            Event.objects.filter(pk=target.pk, status=EventStatus.PENDING).update(status=EventStatus.COMPLETED)
    return added


# --- retrieval ----------------------------------------------------------------------------------------------------

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


# --- extraction ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Extraction:
    """What one extraction produced: the validated JSON (None: skipped) and whether it took the one repair."""

    data: dict[str, Any] | None
    repaired: bool = False
    error: str = ""


def known_events_text(owner: Owner, query: str, limit: int = 8) -> str:
    """The events an extraction may link to: the ones most related to the new exchange, then the newest."""
    walked = events_walk(owner, query, top_k=limit, depth=1, limit=limit)
    events = walked.events or list(
        Event.objects.filter(user_id=owner.user_id, key=owner.key).order_by("-timestamp", "-id")[:limit]
    )
    if not events:
        return "(none yet)"
    return "\n".join(
        f"{event.event_id}: [{event.actor}/{event.action_type}] {event.content_summary}" for event in events
    )


def extract_with_model(
    *, complete: Any, known: str, exchange: str, now: dt.datetime, first_answer: str | None = None
) -> Extraction:
    """Ask the model for the exchange's events (`complete(messages) -> text`), validate, repair once, else skip.
    With `first_answer` (seed 2's combined answer, which came with the reply) that answer is the first try: a valid
    one costs no call, an invalid one gets the one repair call."""
    messages = [
        {"role": "system", "content": EXTRACTION_PROMPT},
        {
            "role": "user",
            "content": f"Now: {now.isoformat(timespec='seconds')}\nKnown events:\n{known}\n\nNew exchange:\n{exchange}",
        },
    ]
    answer = complete(messages) if first_answer is None else first_answer
    try:
        return Extraction(parse_extraction(answer))
    except ExtractionInvalid as exc:
        first_error = str(exc)
    messages += [
        {"role": "assistant", "content": answer},
        {
            "role": "user",
            "content": f"That answer is invalid ({first_error}). Reply again with the JSON object only, matching "
            "the form given. 上面的回答无效，请只输出符合格式的 JSON 对象。",
        },
    ]
    try:
        return Extraction(parse_extraction(complete(messages)), repaired=True)
    except ExtractionInvalid as exc:
        return Extraction(None, repaired=True, error=str(exc))

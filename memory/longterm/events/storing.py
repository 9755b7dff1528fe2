"""Storing an extraction: events deduplicated by their normalised summary (the same fact twice is one event),
events an extraction says are superseded marked (with when and by what; never deleted), entities merged by
normalised name and type, relations added once."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from memory.longterm import store
from memory.longterm.events.when import DATE_TYPE, date_entities
from memory.longterm.strength import Owner
from memory.models import Entity, Event, EventRelation, EventStatus, RelationKind


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
    """What an event is found by: its summary and its entities' names (not the DATE entities' labels: a question
    finds the time an event speaks of through memory.longterm.events.when, not by the label's digits)."""
    names = " ".join(str(entity.get("name") or "") for entity in entities if entity.get("type") != DATE_TYPE)
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
    local = _known_events(owner, extracted)  # the extraction's ids ("n1") and known event ids -> rows
    previous = (
        Event.objects.filter(user_id=owner.user_id, key=owner.key, conversation_id=conversation_id)
        .order_by("-timestamp", "-id")
        .first()
        if conversation_id
        else None
    )
    pending_relations: list[tuple[Event, str, Event]] = []
    for item in extracted.get("new_events") or []:
        entities = _with_dates([e for e in item.get("entities") or [] if str(e.get("name") or "").strip()], item, now)
        event, added = _event_add(
            owner, item, entities, now=now, conversation_id=conversation_id, source_message_ids=source_message_ids
        )
        local[item["event_id"]] = event
        if not added:
            outcome.duplicates += 1
            continue
        outcome.added.append(event)
        pending_relations += _event_links(owner, event, item, entities, local, link_entities=link_entities)
        outcome.superseded += _supersede(event, item, local, now)
        if previous is not None and previous.pk != event.pk:
            pending_relations.append((event, RelationKind.FOLLOWS, previous))
        previous = event
    for relation in extracted.get("relations") or []:
        source, target = local.get(relation["source"]), local.get(relation["target"])
        if source is not None and target is not None and source.pk != target.pk:
            pending_relations.append((source, relation["type"], target))
    outcome.relations = _relations_add(pending_relations)
    return outcome


def _with_dates(entities: list[dict[str, Any]], item: dict[str, Any], now: dt.datetime) -> list[dict[str, Any]]:
    """The item's entities and the times its summary speaks of ("yesterday", "last year" ... resolved against
    `now`, when it was said) as DATE entities: events speaking of the same time are linked like any shared entity."""
    named = {store.normalise(str(entity.get("name"))) for entity in entities}
    dates = [e for e in date_entities(item["content_summary"], timezone.localtime(now)) if e["name"] not in named]
    return entities + dates


def _known_events(owner: Owner, extracted: dict[str, Any]) -> dict[str, Event]:
    """The owner's events the extraction refers to (supersedes, related ids, relations), by event id."""
    known_ids = {
        ref
        for item in extracted.get("new_events") or []
        for ref in [*(item.get("supersedes") or []), *(item.get("related_event_ids") or [])]
    } | {ref for relation in extracted.get("relations") or [] for ref in (relation["source"], relation["target"])}
    rows = Event.objects.filter(user_id=owner.user_id, key=owner.key, event_id__in=known_ids)
    return {row.event_id: row for row in rows}


def _event_add(
    owner: Owner,
    item: dict[str, Any],
    entities: list[dict[str, Any]],
    *,
    now: dt.datetime,
    conversation_id: int | None,
    source_message_ids: Sequence[int],
) -> tuple[Event, bool]:
    """The event of one extracted item: stored now (True), or the stored event with the same summary (False)."""
    summary = item["content_summary"].strip()
    digest = store.text_hash(summary)
    existing = Event.objects.filter(user_id=owner.user_id, key=owner.key, content_hash=digest).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            event = Event.objects.create(
                user_id=owner.user_id,
                key=owner.key,
                agent_id=owner.agent_id,
                event_id=new_event_id(now),
                timestamp=now,
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
        return Event.objects.get(user_id=owner.user_id, key=owner.key, content_hash=digest), False
    return event, True


def _event_links(
    owner: Owner,
    event: Event,
    item: dict[str, Any],
    entities: list[dict[str, Any]],
    local: dict[str, Event],
    *,
    link_entities: bool,
) -> list[tuple[Event, str, Event]]:
    """A new event's entities (stored and attached) and the relations they and its related ids give it."""
    relations: list[tuple[Event, str, Event]] = []
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
        relations += [(event, RelationKind.REFERS_TO, other) for other in earlier]
    for ref in item.get("related_event_ids") or []:
        other = local.get(ref)
        if other is not None:
            relations.append((event, RelationKind.REFERS_TO, other))
    return relations


def _supersede(event: Event, item: dict[str, Any], local: dict[str, Event], now: dt.datetime) -> int:
    """Mark the known events the item says `event` supersedes (never deleted); returns how many."""
    superseded = 0
    for ref in item.get("supersedes") or []:
        old = local.get(ref)
        if old is not None and old.pk != event.pk and old.superseded_by_id is None:
            Event.objects.filter(pk=old.pk).update(superseded_by=event, superseded_at=now)
            superseded += 1
    return superseded


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

"""Deleting long-term memory on a user's request: one event, one vector memory, or everything (the right to be
forgotten). Call inside the tenant scope; only the active tenant's rows are touched.

The search collections (memory.longterm.store) notice a deletion by their row count and rebuild on the next
search, so nothing deleted here is found again.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from memory.models import Dream, Entity, Event, EventRelation, MemoryItem, TurnMemory


@transaction.atomic
def event_delete(*, event: Event) -> None:
    """Delete `event` and its relations. Events it had superseded count as current again, events that named it
    as related stop naming it, and entities no other event of the same memory mentions go with it."""
    entity_ids = list(event.entity_rows.values_list("id", flat=True))
    Event.objects.filter(superseded_by=event).update(superseded_by=None, superseded_at=None)
    naming = Event.objects.filter(user_id=event.user_id, key=event.key).exclude(pk=event.pk)
    for other in naming.filter(related_event_ids__icontains=event.event_id).only("id", "related_event_ids"):
        if event.event_id in other.related_event_ids:
            kept = [ref for ref in other.related_event_ids if ref != event.event_id]
            Event.objects.filter(pk=other.pk).update(related_event_ids=kept)
    event.delete()
    if entity_ids:
        Entity.objects.filter(id__in=entity_ids, events__isnull=True).delete()


@transaction.atomic
def memory_item_delete(*, item: MemoryItem) -> None:
    """Delete one vector memory."""
    item.delete()


@transaction.atomic
def forget_everything(*, user_id: int) -> dict[str, int]:
    """Delete all of the user's long-term memory in the active tenant: events with their relations, entities,
    vector memories, indexed turns and dreams. Returns how many rows of each kind went. Conversations and their
    messages stay (they are the chat history, deleted from the chat)."""
    relations = EventRelation.objects.filter(Q(source__user_id=user_id) | Q(target__user_id=user_id))
    deleted = {"relations": relations.delete()[0]}
    for name, model in (
        ("events", Event),
        ("entities", Entity),
        ("memories", MemoryItem),
        ("turns", TurnMemory),
        ("dreams", Dream),
    ):
        _total, per_model = model.objects.filter(user_id=user_id).delete()
        deleted[name] = per_model.get(model._meta.label, 0)
    return deleted

"""Issue 38, point 6: what a recall keeps per process (the owner's search collection, the compiled statements of
its reads) follows the database, whoever wrote it, and never crosses tenants."""

import datetime as dt

import numpy as np
import pytest

from agents.services import conversation_start
from memory.longterm import store
from memory.longterm.events import events_store, events_walk, rule_event
from memory.longterm.recall import owner_of
from memory.models import Event, EventRelation, RelationKind
from tenants.scope import tenant_scope

T0 = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.UTC)


def _say(owner, conversation, text, minutes):
    outcome = events_store(
        owner, {"new_events": [rule_event(actor="user", text=text)]}, conversation_id=conversation.pk,
        now=T0 + dt.timedelta(minutes=minutes), link_entities=False,
    )  # fmt: skip
    return outcome.added[0]


def _copy(event, text):
    """A row written straight to the table (as another process's extraction would: nothing in this process hears)."""
    return Event.objects.create(
        tenant_id=event.tenant_id, user_id=event.user_id, key=event.key, event_id=f"{event.event_id}x",
        timestamp=event.timestamp + dt.timedelta(minutes=5), actor=event.actor, action_type=event.action_type,
        content_summary=text, content_hash=store.text_hash(text), conversation_id=event.conversation_id,
        **store.search_fields(text),
    )  # fmt: skip


def _found(owner, query):
    return {event.content_summary for event in events_walk(owner, query, top_k=5, depth=1).events}


@pytest.mark.django_db
def test_a_write_from_outside_the_process_is_seen_by_the_next_walk(make_agent, member, in_tenant):
    conversation = conversation_start(agent=make_agent(), user=member)
    owner = owner_of(conversation)
    first = _say(owner, conversation, "The harbour of Vigo closed because of the storm.", 0)
    _say(owner, conversation, "The printer needs paper.", 1)
    assert "The harbour of Vigo closed because of the storm." in _found(owner, "harbour of Vigo")  # cached now

    added = _copy(first, "The ferry to the harbour of Vigo was cancelled.")
    assert added.content_summary in _found(owner, "harbour of Vigo")  # a new row: the collection grows

    Event.objects.filter(pk=first.pk).delete()
    assert _found(owner, "harbour of Vigo") >= {added.content_summary}
    assert first.content_summary not in _found(owner, "harbour of Vigo")  # a deleted row: rebuilt

    # A relation written later is followed by the next walk (the statement is reused, the ids are this walk's).
    printer = Event.objects.get(content_summary="The printer needs paper.")
    EventRelation.objects.create(tenant_id=added.tenant_id, source=added, target=printer, kind=RelationKind.CAUSES)
    walked = events_walk(owner, "ferry cancelled", top_k=1, depth=1)
    assert [event.pk for event in walked.events][:2] == [added.pk, printer.pk]
    assert {(relation.source_id, relation.target_id) for relation in walked.relations} == {(added.pk, printer.pk)}


@pytest.mark.django_db
def test_one_owner_in_two_tenants_is_two_collections(make_agent, member, tenant, other_tenant):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=make_agent(), user=member)
        owner = owner_of(conversation)
        ours = _say(owner, conversation, "The harbour of Vigo closed because of the storm.", 0)
        assert _found(owner, "harbour of Vigo") == {ours.content_summary}
    with tenant_scope(other_tenant):  # the same user and memory key, the other tenant's row
        theirs = Event.objects.create(
            tenant=other_tenant, user_id=member.pk, key=owner.key, event_id="evt_other", timestamp=T0,
            content_summary="The harbour of Vigo reopened.", content_hash=store.text_hash("reopened"),
            **store.search_fields("The harbour of Vigo reopened."),
        )  # fmt: skip
        assert _found(owner, "harbour of Vigo") == {theirs.content_summary}
    with tenant_scope(tenant):
        assert _found(owner, "harbour of Vigo") == {ours.content_summary}


def test_cosines_in_blocks_are_the_one_product():
    rng = np.random.default_rng(7)
    for rows in (3, 1024, 2500, 10001):
        matrix = rng.standard_normal((rows, 384)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        vector = rng.standard_normal(384).astype(np.float32)
        assert np.allclose(store._cosines(matrix, vector), matrix @ vector, rtol=0, atol=1e-6)
    assert np.array_equal(store._cosines(matrix[:1000], vector), matrix[:1000] @ vector)  # one block: one product

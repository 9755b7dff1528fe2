"""Issue 38, point 6: an owner's search collection is checked for freshness by one row of CollectionState, kept by
triggers on PostgreSQL (migration memory 0019), instead of counting the owner's rows at every recall. The row must
say what a count says, whoever writes, deletes or cascades, and stay inside its tenant."""

import datetime as dt
import importlib
import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count, Max

from agents.services import conversation_start
from memory.longterm import store
from memory.longterm.recall import owner_of
from memory.models import CollectionState, Conversation, Event, MemoryItem, TurnMemory
from tenants.scope import all_tenants, tenant_scope
from tests.factories import UserFactory

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the triggers are PostgreSQL's; SQLite counts"
)

T0 = dt.datetime(2024, 3, 1, 9, 0, tzinfo=dt.UTC)
MIGRATION = importlib.import_module("memory.migrations.0019_collection_state")


def _event(tenant, user, key, number, conversation=None):
    return Event(
        tenant=tenant, user=user, key=key, event_id=f"evt_{user.pk}_{key}_{number}", timestamp=T0,
        content_summary=f"fact {number}", content_hash=f"{key}-{number}", conversation=conversation,
    )  # fmt: skip


def _counted(model, **owner):
    found = model.objects.filter(**owner).aggregate(count=Count("id"), newest=Max("id"))
    return found["count"], found["newest"] or 0


def _kept(model, **owner):
    rows = CollectionState.objects.filter(label=model._meta.label_lower, **owner)
    return sum(row.row_count for row in rows), max((row.newest_id for row in rows), default=0)


def test_the_migration_keeps_the_owners_the_models_declare():
    for model in (Event, MemoryItem, TurnMemory):
        label, *columns = MIGRATION.TABLES[model._meta.db_table]
        assert label == model._meta.label_lower
        declared = [name for name, column in zip(MIGRATION.OWNER, columns, strict=True) if column == name]
        assert tuple(declared) == model.collection_owner


@postgresql_only
@pytest.mark.django_db
def test_inserts_bulk_inserts_and_deletes_keep_the_row_equal_to_a_count(tenant, member, in_tenant):
    other = UserFactory(username="other-user")
    one = _event(tenant, member, "k1", 0)
    one.save()
    assert _kept(Event, user_id=member.pk, key="k1") == _counted(Event, user_id=member.pk, key="k1") == (1, one.pk)

    made = Event.objects.bulk_create(
        [_event(tenant, member, "k1", n) for n in range(1, 6)]
        + [_event(tenant, member, "k2", n) for n in range(3)]
        + [_event(tenant, other, "k1", n) for n in range(2)]
    )  # one statement, three owners
    for owner in ({"user_id": member.pk, "key": "k1"}, {"user_id": member.pk, "key": "k2"}, {"user_id": other.pk}):
        assert _kept(Event, **owner) == _counted(Event, **owner), owner
    assert _kept(Event, user_id=member.pk) == (9, made[7].pk)  # a user's keys add up (memory_search's filter)

    newest_k1 = made[4]
    Event.objects.filter(pk=newest_k1.pk).delete()  # the newest: the row's newest id moves back
    assert _kept(Event, user_id=member.pk, key="k1") == _counted(Event, user_id=member.pk, key="k1") == (5, made[3].pk)
    Event.objects.filter(user_id=member.pk, key="k1").delete()
    assert _kept(Event, user_id=member.pk, key="k1") == (0, 0)
    assert _kept(Event, user_id=member.pk, key="k2") == (3, made[7].pk)  # another owner untouched


@postgresql_only
@pytest.mark.django_db
def test_cascades_from_a_deleted_user_or_conversation_are_counted(tenant, member, make_agent, in_tenant):
    conversation = conversation_start(agent=make_agent(), user=member)
    owner = owner_of(conversation)
    mine = {"tenant": tenant, "user": member, "key": owner.key}
    MemoryItem.objects.bulk_create([MemoryItem(**mine, text=f"t{n}", text_hash=f"h{n}", time=T0) for n in range(4)])
    TurnMemory.objects.bulk_create(
        [TurnMemory(**mine, conversation=conversation, user_message_id=n, text="x") for n in range(3)]
    )
    assert _kept(TurnMemory, conversation_id=conversation.pk) == _counted(TurnMemory, conversation_id=conversation.pk)
    assert _kept(MemoryItem, user_id=member.pk, key=owner.key)[0] == 4

    Conversation.objects.filter(pk=conversation.pk).delete()  # TurnMemory cascades (Django deletes the rows)
    assert _kept(TurnMemory, conversation_id=conversation.pk) == (0, 0)
    get_user_model().objects.filter(pk=member.pk).delete()  # so do the user's memories
    assert _kept(MemoryItem, user_id=member.pk, key=owner.key) == (0, 0)


@postgresql_only
@pytest.mark.django_db
def test_the_row_stays_in_its_tenant(tenant, other_tenant, member):
    with tenant_scope(tenant):
        _event(tenant, member, "shared", 0).save()
    with tenant_scope(other_tenant):  # the same user and key in another tenant: its own row, the first one unseen
        Event.objects.bulk_create([_event(other_tenant, member, "shared", n) for n in (1, 2)])
        assert _kept(Event, user_id=member.pk, key="shared")[0] == 2
        with connection.cursor() as cursor:  # past the scoped manager: row-level security hides the other's row
            cursor.execute("SELECT tenant_id, row_count FROM memory_collectionstate WHERE label = 'memory.event'")
            assert cursor.fetchall() == [(other_tenant.pk, 2)]
    with tenant_scope(tenant):
        assert _kept(Event, user_id=member.pk, key="shared")[0] == 1
    with all_tenants(reason="test: both tenants' rows"):
        assert CollectionState.objects.filter(label="memory.event").count() == 2


@postgresql_only
@pytest.mark.django_db
def test_a_recall_reads_the_row_not_the_owners_rows(tenant, member, in_tenant):
    Event.objects.bulk_create([_event(tenant, member, "k", n) for n in range(3)])
    seen = []
    with connection.execute_wrapper(lambda execute, sql, *args: seen.append(sql) or execute(sql, *args)):
        held = store.collection(Event, user_id=member.pk, key="k")
    assert sum(len(segment.ids) for segment in held.segments) == 3
    assert "memory_collectionstate" in seen[0] and "memory_event" not in seen[0]
    Event.objects.filter(user_id=member.pk, key="k").order_by("-id")[:1].get().delete()
    held = store.collection(Event, user_id=member.pk, key="k")  # the count no longer adds up: rebuilt
    assert sum(len(segment.ids) for segment in held.segments) == 2
    # A filter the row does not hold (the conversation of an event) still counts the rows.
    assert not store._kept_by_triggers(Event, {"conversation_id": 1}, "default")


@postgresql_only
@pytest.mark.django_db
def test_an_owner_without_rows_costs_one_statement_a_use(member, in_tenant):
    """No state row yet: SUM and MAX of nothing are NULL, which must read as an empty collection that is current
    (the reused statement bypasses the ORM, so the NULLs reach `collection` as they are)."""
    for _ in range(2):
        store.collection(MemoryItem, user_id=member.pk, key="nothing")  # the second call reuses the statement
    seen = []
    with connection.execute_wrapper(lambda execute, sql, *args: seen.append(sql) or execute(sql, *args)):
        held = store.collection(MemoryItem, user_id=member.pk, key="nothing")
    assert len(seen) == 1 and "memory_collectionstate" in seen[0]
    assert not any(len(segment.ids) for segment in held.segments)


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_the_migration_counts_the_rows_stored_before_it(tenant, member):
    """An upgrade: the events stored before migration 0019 are counted into their owners' rows by it, and the
    migration goes back (its triggers and functions dropped) and forward again."""
    with tenant_scope(tenant):
        Event.objects.bulk_create([_event(tenant, member, "old", n) for n in range(4)])
    executor = MigrationExecutor(connection)
    with all_tenants(reason="test: a migration runs for every tenant, as migrate does"):
        executor.migrate([("memory", "0018_memory_multilingual")])
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgname IN ('state_added', 'state_removed')")
            assert cursor.fetchone() == (0,)
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    with tenant_scope(tenant):
        assert _kept(Event, user_id=member.pk, key="old") == _counted(Event, user_id=member.pk, key="old")
        assert _kept(Event, user_id=member.pk, key="old")[0] == 4


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_delete_beside_an_uncommitted_insert_keeps_the_newest_id(tenant, member):
    """The newest row deleted while another transaction inserts a newer one: the delete waits for that row lock and
    must not set the newest id from a read that cannot see the insert (which would leave the state behind the table,
    and every recall rebuilding its collection until the next write)."""
    with tenant_scope(tenant):
        _first, second = Event.objects.bulk_create([_event(tenant, member, "race", n) for n in (0, 1)])
    inserted, deleting = threading.Event(), threading.Event()
    newer: list[int] = []

    def insert() -> None:
        with tenant_scope(tenant), transaction.atomic():
            row = _event(tenant, member, "race", 2)
            row.save()
            newer.append(row.pk)
            inserted.set()
            deleting.wait(5)
            time.sleep(0.3)  # the delete is waiting on the state row's lock by now
        connection.close()

    def delete() -> None:
        inserted.wait(5)
        with tenant_scope(tenant):
            deleting.set()
            Event.objects.filter(pk=second.pk).delete()  # the newest this transaction can see
        connection.close()

    threads = [threading.Thread(target=insert), threading.Thread(target=delete)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    with tenant_scope(tenant):
        assert _counted(Event, user_id=member.pk, key="race") == (2, newer[0])
        assert _kept(Event, user_id=member.pk, key="race") == (2, newer[0])

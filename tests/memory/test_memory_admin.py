"""The long-term memory admin: a tenant's administrators read their tenant's events (with relations), entities,
memories, indexed turns, dreams and counters, delete events and memories, edit none; another tenant's rows are
never shown or deleted."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.services import agent_create
from memory.longterm import metrics
from memory.models import Dream, Entity, Event, EventRelation, MemoryItem, MemoryMetric
from tenants.scope import tenant_scope
from tests.memory.memory_data import remember_story

pytestmark = pytest.mark.django_db

ADMIN_PAGES = ["event", "entity", "memoryitem", "turnmemory", "dream", "memorymetric"]


@pytest.fixture(autouse=True)
def _english(client):
    client.defaults.update(HTTP_ACCEPT_LANGUAGE="en")


@pytest.fixture
def stories(tenant, other_tenant, member, other_tenant_admin):
    with tenant_scope(tenant):
        mine = remember_story(user=member, agent_id=agent_create(tenant=tenant, name="Solar advisor").pk)
        metrics.count(agent_id=mine.owner.agent_id, extractions=2, events_added=4)
    with tenant_scope(other_tenant):
        chef = agent_create(tenant=other_tenant, name="Noodle chef")
        theirs = remember_story(user=other_tenant_admin, agent_id=chef.pk, word=" NOODLEMARK")
    return {"mine": mine, "theirs": theirs}


def test_a_tenant_admin_lists_their_tenants_memory_only(login, tenant_admin, tenant, stories):
    client = login(tenant_admin, tenant)
    for name in ADMIN_PAGES:
        response = client.get(reverse(f"admin:memory_{name}_changelist"))
        assert response.status_code == 200, name
        assert "NOODLEMARK" not in response.content.decode() and "other-admin" not in response.content.decode()
    events = client.get(reverse("admin:memory_event_changelist")).content.decode()
    assert "Typhoon closed port Alder" in events and "member" in events
    memories = client.get(reverse("admin:memory_memoryitem_changelist"), {"q": "email"}).content.decode()
    assert "Prefers email over phone calls" in memories
    # The user filter offers the tenant's memory owners, not the platform's users.
    filtered = client.get(reverse("admin:memory_event_changelist"), {"user__id__exact": stories["mine"].owner.user_id})
    assert filtered.status_code == 200 and "Typhoon closed port Alder" in filtered.content.decode()


def test_an_event_page_shows_its_relations_and_nothing_is_editable(login, tenant_admin, tenant, stories):
    client = login(tenant_admin, tenant)
    delayed = stories["mine"].delayed
    page = client.get(reverse("admin:memory_event_change", args=[delayed.pk])).content.decode()
    assert "Order 42 shipment is delayed" in page and "Relations to this event" in page
    assert "Typhoon closed port Alder" in page  # the event that causes it
    assert client.get(reverse("admin:memory_event_add")).status_code == 403
    with tenant_scope(tenant):
        before = Event.objects.get(pk=delayed.pk).content_summary
    client.post(reverse("admin:memory_event_change", args=[delayed.pk]), {"content_summary": "changed"})
    with tenant_scope(tenant):
        assert Event.objects.get(pk=delayed.pk).content_summary == before
    metric = client.get(reverse("admin:memory_memorymetric_changelist")).content.decode()
    assert "memorymetric" in metric
    with tenant_scope(tenant):
        metric_row = MemoryMetric.objects.get()
    assert client.get(reverse("admin:memory_memorymetric_delete", args=[metric_row.pk])).status_code == 403


def test_a_tenant_admin_deletes_an_event_and_a_memory(login, tenant_admin, tenant, stories):
    client = login(tenant_admin, tenant)
    mine = stories["mine"]
    response = client.post(reverse("admin:memory_event_delete", args=[mine.rerouted.pk]), {"post": "yes"})
    assert response.status_code == 302
    response = client.post(reverse("admin:memory_memoryitem_delete", args=[mine.memory.pk]), {"post": "yes"})
    assert response.status_code == 302
    with tenant_scope(tenant):
        assert not Event.objects.filter(pk=mine.rerouted.pk).exists()
        assert not EventRelation.objects.filter(source_id=mine.rerouted.pk).exists()
        assert not Entity.objects.filter(name="Port Birch").exists()  # named by the deleted event only
        assert not MemoryItem.objects.exists()
        assert Event.objects.count() == 3


def test_another_tenants_admin_is_refused_a_foreign_row(login, other_tenant_admin, other_tenant, tenant, stories):
    client = login(other_tenant_admin, other_tenant)
    mine = stories["mine"]
    rows = [("event", mine.delayed.pk), ("memoryitem", mine.memory.pk), ("dream", mine.dream.pk)]
    with tenant_scope(tenant):
        rows.append(("entity", Entity.objects.first().pk))
    for name, pk in rows:
        for action in ("change", "delete"):
            response = client.get(reverse(f"admin:memory_{name}_{action}", args=[pk]), follow=True)
            assert response.redirect_chain and "Typhoon" not in response.content.decode(), (name, action)
            assert client.post(reverse(f"admin:memory_{name}_delete", args=[pk]), {"post": "yes"}).status_code in (
                302,
                404,
            )
    listing = client.get(reverse("admin:memory_event_changelist")).content.decode()
    assert "NOODLEMARK" in listing and "Typhoon closed port Alder<" not in listing
    with tenant_scope(tenant):
        assert Event.objects.count() == 4 and MemoryItem.objects.count() == 1 and Dream.objects.count() == 1


def test_a_member_has_no_memory_admin(login, member, tenant, stories):
    client = login(member, tenant)
    response = client.get(reverse("admin:memory_event_changelist"))
    assert response.status_code == 302 and "login" in response.url

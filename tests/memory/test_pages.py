"""The memory page: a member sees their own long-term memory (events with their graph, memories, dreams) by agent,
searches it without changing it, deletes one event or memory and forgets everything, each after a confirmation
and by POST only. Another member of the tenant, or anyone of another tenant, never sees or deletes it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from agents.services import agent_create, conversation_start
from memory.longterm.recall import turn_index
from memory.longterm.selectors import memory_counts
from memory.models import Dream, Entity, Event, EventRelation, MemoryItem, Message
from memory.services import message_add
from tenants.models import Role
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, UserFactory
from tests.memory.memory_data import START, remember_story

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(client):
    """The assertions read the English texts (the site's default language is zh-hans)."""
    client.defaults.update(HTTP_ACCEPT_LANGUAGE="en")


@pytest.fixture
def colleague(tenant):
    return MembershipFactory(tenant=tenant, role=Role.MEMBER, user=UserFactory(username="colleague")).user


@pytest.fixture
def stranger(other_tenant):
    return MembershipFactory(tenant=other_tenant, role=Role.MEMBER, user=UserFactory(username="stranger")).user


@pytest.fixture
def world(tenant, other_tenant, member, colleague, stranger):
    """The member's story with the solar advisor, a colleague's and a stranger's (other tenant), each marked."""
    with tenant_scope(tenant):
        advisor = agent_create(tenant=tenant, name="Solar advisor")
        mine = remember_story(user=member, agent_id=advisor.pk)
        theirs = remember_story(user=colleague, agent_id=advisor.pk, word=" COLLEAGUEMARK")
    with tenant_scope(other_tenant):
        chef = agent_create(tenant=other_tenant, name="Noodle chef")
        foreign = remember_story(user=stranger, agent_id=chef.pk, word=" STRANGERMARK")
    return {"advisor": advisor, "mine": mine, "theirs": theirs, "foreign": foreign}


def _rows(tenant, user) -> dict[str, int]:
    with tenant_scope(tenant):
        return memory_counts(user_id=user.pk)


def test_the_home_page_has_a_memory_card(login, member, tenant):
    page = login(member, tenant).get(reverse("home")).content.decode()
    assert 'data-card="memory"' in page and reverse("memory:index") in page


def test_the_page_needs_a_login_and_a_tenant(client, member):
    response = client.get(reverse("memory:index"))
    assert response.status_code == 302 and reverse("login") in response.url
    client.force_login(UserFactory(username="lonely"))
    assert client.get(reverse("memory:index")).status_code == 404


def test_a_member_sees_their_events_graph_memories_and_dreams(login, member, tenant, world):
    mine = world["mine"]
    response = login(member, tenant).get(reverse("memory:index"))
    page = response.content.decode()
    assert response.status_code == 200
    shown = ("Typhoon closed port Alder", "Order 42 shipment is delayed", "Port Alder reopened on Wednesday",
             "Prefers email over phone calls", "A ship sails through a closed harbour", "Solar advisor")  # fmt: skip
    for text in shown:
        assert text in page
    # The table: the superseded event says by what, the entities and the status show.
    row = re.search(rf'<tr id="event-{mine.port_closed.pk}".*?</tr>', page, re.S).group(0)
    assert 'class="superseded"' in row and "Port Alder reopened on Wednesday" in row
    # The action and the entity type in the reader's words; the event id only in a tooltip.
    assert ">Report</td>" in row and "Port Alder <small>place</small>" in row and "PLACE" not in row
    assert f'title="Event id: {mine.port_closed.event_id}"' in row and f">{mine.port_closed.event_id}<" not in row
    delayed = re.search(rf'<tr id="event-{mine.delayed.pk}".*?</tr>', page, re.S).group(0)
    assert "Completed" in delayed and "Order 42" in delayed  # the rerouting resolved it
    # The picture: one node per event, the relations drawn with their labels, the superseded event marked.
    svg = re.search(r'<svg class="event-graph".*?</svg>', page, re.S).group(0)
    assert re.search(r'viewBox="0 0 \d+ \d+"', svg)
    assert svg.count('class="node ') == 4
    assert re.search(rf'<a href="#event-{mine.port_closed.pk}" class="node [^"]*superseded', svg)
    labels = re.findall(r'<text class="edge-label[^"]*"[^>]*>([^<]*)</text>', svg)
    assert sorted(labels) == ["causes", "follows", "follows", "resolves", "superseded by"]
    assert 'data-relation="causes"' in svg and "<script" not in page.split("</main>")[0]
    # The memory table: level, long-term flag, time, times recalled.
    memory_row = re.search(rf'<tr id="memory-{mine.memory.pk}".*?</tr>', page, re.S).group(0)
    assert "Prefers email" in memory_row and "2025-07-17" in memory_row


def test_nobody_else_sees_them(login, member, colleague, stranger, tenant, other_tenant, world):
    page = login(member, tenant).get(reverse("memory:index")).content.decode()
    assert "COLLEAGUEMARK" not in page and "STRANGERMARK" not in page and "Noodle chef" not in page
    theirs = login(colleague, tenant).get(reverse("memory:index")).content.decode()
    assert "COLLEAGUEMARK" in theirs and "Typhoon closed port Alder</td>" not in theirs
    assert str(world["mine"].memory.text) + "<" not in theirs
    foreign = login(stranger, other_tenant).get(reverse("memory:index")).content.decode()
    assert "STRANGERMARK" in foreign and "COLLEAGUEMARK" not in foreign and "Solar advisor" not in foreign


def test_search_finds_only_ones_own_memory_and_changes_nothing(login, member, tenant, world):
    mine = world["mine"]
    with tenant_scope(tenant):
        before = list(MemoryItem.objects.order_by("id").values("id", "level", "time", "recalls", "long_term"))
    response = login(member, tenant).get(reverse("memory:index"), {"q": "harbour typhoon port email"})
    page = response.content.decode()
    results = re.search(r'<section class="panel" id="search-results">.*?</section>', page, re.S).group(0)
    assert f'data-event="{mine.port_closed.event_id}"' in results
    assert f'data-memory="{mine.memory.pk}"' in results
    assert "COLLEAGUEMARK" not in page and "STRANGERMARK" not in page
    with tenant_scope(tenant):
        after = list(MemoryItem.objects.order_by("id").values("id", "level", "time", "recalls", "long_term"))
    assert after == before


def test_the_agent_filter_shows_one_memory_key_and_names_a_plan_steps(login, member, tenant, world):
    advisor = world["advisor"]
    step_key = f"{advisor.pk}_{member.pk}_777"
    with tenant_scope(tenant):
        remember_story(user=member, agent_id=advisor.pk, key=step_key, word=" STEPMARK")
    client = login(member, tenant)
    page = client.get(reverse("memory:index")).content.decode()
    assert "Solar advisor · a plan step&#x27;s memory (conversation 777)" in page
    assert "STEPMARK" in page and f'id="event-{world["mine"].port_closed.pk}"' in page
    only_step = client.get(reverse("memory:index"), {"key": step_key}).content.decode()
    assert "STEPMARK" in only_step and f'id="event-{world["mine"].port_closed.pk}"' not in only_step
    # A key that is not the user's is no filter: an error, never another user's rows.
    colleague_key = world["theirs"].owner.key
    refused = client.get(reverse("memory:index"), {"key": colleague_key})
    assert refused.context["form"].errors["key"] and "COLLEAGUEMARK" not in refused.content.decode()


def test_deleting_an_event_asks_first_and_needs_post(login, member, colleague, tenant, world):
    mine = world["mine"]
    client = login(member, tenant)
    url = reverse("memory:event_delete", args=[mine.delayed.pk])
    confirm = client.get(url).content.decode()
    assert "Order 42 shipment is delayed" in confirm and "its 4 relations are deleted" in confirm
    assert 'method="post"' in confirm and "csrfmiddlewaretoken" in confirm
    with tenant_scope(tenant):
        assert Event.objects.filter(pk=mine.delayed.pk).exists()
    assert client.put(url).status_code == 405

    response = client.post(url)
    assert response.status_code == 302 and response.url.startswith(reverse("memory:index"))
    with tenant_scope(tenant):
        assert not Event.objects.filter(pk=mine.delayed.pk).exists()
        assert not EventRelation.objects.filter(source__user=member).exists()
        # "Order 42" is still named by the rerouting; nothing else of the member's went.
        assert Entity.objects.filter(user=member, name="Order 42").exists()
        assert Event.objects.filter(user=member).count() == 3
    page = client.get(response.url).content.decode()
    assert "Deleted the event “Order 42 shipment is delayed”." in page
    assert f'id="event-{mine.delayed.pk}"' not in page and f'data-event="{mine.delayed.event_id}"' not in page
    assert _rows(tenant, colleague)["events"] == 4


def test_deleting_the_newer_event_makes_the_older_current_again(login, member, tenant, world):
    mine = world["mine"]
    login(member, tenant).post(reverse("memory:event_delete", args=[mine.reopened.pk]))
    with tenant_scope(tenant):
        closed = Event.objects.get(pk=mine.port_closed.pk)
    assert closed.superseded_by_id is None and closed.superseded_at is None


def test_deleting_an_event_forgets_entities_no_other_event_names(login, member, tenant, world):
    mine = world["mine"]
    login(member, tenant).post(reverse("memory:event_delete", args=[mine.rerouted.pk]))
    with tenant_scope(tenant):
        names = set(Entity.objects.filter(user=member).values_list("name", flat=True))
    # Port Birch was named by the rerouting only; 2025-07-16 is the Wednesday the reopening speaks of (a DATE).
    assert names == {"Port Alder", "Order 42", "2025-07-16"}


def test_another_users_event_or_memory_is_a_404_and_stays(login, member, tenant, world):
    client = login(member, tenant)
    for story in (world["theirs"], world["foreign"]):
        for url in (reverse("memory:event_delete", args=[story.delayed.pk]),
                    reverse("memory:item_delete", args=[story.memory.pk])):  # fmt: skip
            assert client.get(url).status_code == 404
            assert client.post(url).status_code == 404
    assert _rows(tenant, world["theirs"].dream.user)["events"] == 4
    assert _rows(tenant, world["mine"].dream.user)["events"] == 4
    foreign = world["foreign"]
    # entities: three names and the Wednesday the reopening speaks of (a DATE)
    assert _rows(foreign.dream.tenant, foreign.dream.user) == {
        "events": 4, "relations": 4, "entities": 4, "memories": 1, "turns": 0, "dreams": 1,
    }  # fmt: skip


def test_deleting_a_memory_asks_first(login, member, tenant, world):
    mine = world["mine"]
    client = login(member, tenant)
    url = reverse("memory:item_delete", args=[mine.memory.pk])
    assert "Prefers email over phone calls" in client.get(url).content.decode()
    with tenant_scope(tenant):
        assert MemoryItem.objects.filter(pk=mine.memory.pk).exists()
    assert client.post(url).status_code == 302
    with tenant_scope(tenant):
        assert not MemoryItem.objects.filter(user=member).exists()
        assert MemoryItem.objects.filter(pk=world["theirs"].memory.pk).exists()


def test_forgetting_everything_says_what_goes_and_deletes_only_the_users_rows(
    login, member, colleague, stranger, tenant, other_tenant, world
):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=world["advisor"], user=member)
        question = message_add(conversation=conversation, role="user", content="Where is order 42?")
        turn_index(conversation, user_message=question, reply=None)
    client = login(member, tenant)
    mine_before = _rows(tenant, member)
    # entities: three names and the Wednesday the reopening speaks of (a DATE)
    assert mine_before == {"events": 4, "relations": 4, "entities": 4, "memories": 1, "turns": 1, "dreams": 1}
    colleague_before, stranger_before = _rows(tenant, colleague), _rows(other_tenant, stranger)

    confirm = client.get(reverse("memory:forget")).content.decode()
    counts = dict(re.findall(r'<li data-count="(\w+)">(\d+) ', confirm))
    assert counts == {name: str(value) for name, value in mine_before.items()}
    assert _rows(tenant, member) == mine_before  # looking is not forgetting

    response = client.post(reverse("memory:forget"), follow=True)
    forgotten = (
        "Everything was forgotten (events: 4, relations: 4, named things: 4, memories: 1, indexed turns: 1, dreams: 1)."
    )
    assert forgotten in response.content.decode()
    assert _rows(tenant, member) == dict.fromkeys(mine_before, 0)
    assert _rows(tenant, colleague) == colleague_before
    assert _rows(other_tenant, stranger) == stranger_before
    with tenant_scope(tenant):
        assert not Dream.objects.filter(user=member).exists()
        assert Message.objects.filter(conversation=conversation).exists()  # the chat history stays
    assert "nothing to forget" in client.get(reverse("memory:forget")).content.decode()


def test_forgetting_in_one_tenant_leaves_the_users_memory_in_another(login, member, tenant, other_tenant, world):
    MembershipFactory(tenant=other_tenant, user=member, role=Role.MEMBER)
    with tenant_scope(other_tenant):
        elsewhere = remember_story(user=member, agent_id=world["foreign"].owner.agent_id, word=" ELSEWHERE")
    login(member, tenant).post(reverse("memory:forget"))
    assert _rows(tenant, member)["events"] == 0
    assert _rows(other_tenant, member)["events"] == 4
    page = login(member, other_tenant).get(reverse("memory:index")).content.decode()
    assert f'id="event-{elsewhere.delayed.pk}"' in page and f'id="event-{world["mine"].delayed.pk}"' not in page


def test_the_page_reads_a_bounded_number_of_queries(login, member, tenant, world, django_assert_max_num_queries):
    with tenant_scope(tenant):
        for number in range(40):
            Event.objects.create(
                user=member, key=world["mine"].owner.key, agent_id=world["advisor"].pk, event_id=f"evt_bulk_{number}",
                timestamp=START, content_summary=f"bulk event {number}", content_hash=f"bulk{number}",
            )  # fmt: skip
    client = login(member, tenant)
    with django_assert_max_num_queries(16):
        response = client.get(reverse("memory:index"))
    assert response.content.decode().count('class="node ') == 44

"""Seed 3's vector memory: every branch of the level rules with a fake clock, recall's writes, sleep and dreams."""

import datetime as dt
import random

import pytest
from django.utils import timezone

from memory.longterm import strength
from memory.longterm.strength import Owner, gap, recall, remember, sleep, strengthen, weaken
from memory.models import Dream, MemoryItem, MemoryMetric

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 1, 1, 9, 0, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def _rules(settings):
    settings.MEMORY_GAP_SECONDS = 100
    settings.MEMORY_GAP_FACTOR = 2
    settings.MEMORY_LEVEL_CAP = 3


def _item(level=0, long_term=False, time=T0):
    return MemoryItem(text="x", level=level, long_term=long_term, time=time)


def at(seconds):
    return T0 + dt.timedelta(seconds=seconds)


def test_the_gap_doubles_with_the_level_and_stops_at_the_cap():
    assert [gap(level).total_seconds() for level in range(6)] == [100, 200, 400, 800, 800, 800]


def test_level_zero_always_rises_even_at_once():
    item = _item(level=0)
    strengthen(item, at(0))
    assert (item.level, item.time, item.recalls) == (1, at(0), 1)


@pytest.mark.parametrize(("elapsed", "level_after"), [(200, 1), (201, 2)])
def test_a_recall_strengthens_only_after_more_than_the_gap_of_the_level(elapsed, level_after):
    item = _item(level=1)
    strengthen(item, at(elapsed))
    assert item.level == level_after
    assert item.time == at(elapsed)  # the time is the recall's either way


def test_reaching_the_cap_makes_a_memory_long_term_and_fixed():
    item = _item(level=2)
    strengthen(item, at(401))
    assert (item.level, item.long_term) == (3, True)
    strengthen(item, at(10_000))
    assert (item.level, item.long_term, item.time) == (3, True, at(10_000))
    assert weaken(item, at(1_000_000)) is False and item.level == 3


@pytest.mark.parametrize(("level", "elapsed", "level_after", "deleted"), [
    (1, 200, 1, False),  # not more than the gap: unchanged
    (1, 201, 0, False),
    (0, 100, 0, False),
    (0, 101, -1, True),  # at -1 it goes
])  # fmt: skip
def test_a_passed_over_memory_sinks_after_its_gap_and_goes_at_minus_one(level, elapsed, level_after, deleted):
    item = _item(level=level)
    assert weaken(item, at(elapsed)) is deleted
    assert item.level == level_after
    assert item.time == T0  # passing over does not renew the time


def test_recall_returns_the_top_n_strengthens_them_and_weakens_or_deletes_the_rest(member, in_tenant):
    owner = Owner(user_id=member.pk, key="7_1")
    best = remember(owner, "The user's cat is called Mochi and loves tuna", now=T0)
    weaker = remember(owner, "The user once had a cat", now=T0)
    kept = remember(owner, "The cat needs a vet visit in spring", now=at(90))
    strong = remember(owner, "cat allergy: the user's sister", now=T0)
    MemoryItem.objects.filter(pk=strong.pk).update(level=2)

    result = recall(owner, "what is the name of the user's cat Mochi", now=at(150), top_n=1)

    assert [item.pk for item in result.returned] == [best.pk]
    best.refresh_from_db()
    assert (best.level, best.time, best.recalls) == (1, at(150), 1)
    # Passed over: level 0 written 150 s ago (> 100) is deleted; written 60 s ago stays at 0; level 2 (gap 400) stays.
    assert not MemoryItem.objects.filter(pk=weaker.pk).exists()
    assert "The user once had a cat" in result.deleted
    kept.refresh_from_db()
    strong.refresh_from_db()
    assert (kept.level, strong.level) == (0, 2)


def test_remembering_the_same_text_twice_is_one_memory_with_a_new_time(member, in_tenant):
    owner = Owner(user_id=member.pk, key="7_1")
    first = remember(owner, "Prefers tea to coffee.", now=T0)
    again = remember(owner, "  prefers TEA to coffee ", now=at(50))
    assert first.pk == again.pk
    assert MemoryItem.objects.count() == 1
    assert MemoryItem.objects.get().time == at(50)


def test_memories_are_kept_per_user_and_key(member, tenant_admin, in_tenant):
    remember(Owner(user_id=member.pk, key="7_1"), "The member's secret is blue", now=T0)
    assert recall(Owner(user_id=tenant_admin.pk, key="7_1"), "secret blue", now=at(1)).returned == []
    assert recall(Owner(user_id=member.pk, key="8_1"), "secret blue", now=at(1)).returned == []
    assert [i.text for i in recall(Owner(user_id=member.pk, key="7_1"), "secret blue", now=at(1)).returned] == [
        "The member's secret is blue"
    ]


def test_sleep_forgets_due_memories_and_dreams_of_them(member, tenant, in_tenant, scripted_provider, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "I dreamt of a lighthouse made of tea."}})
    owner = Owner(user_id=member.pk, key="7_1", agent_id=7)
    for text in ("a lighthouse", "green tea", "a ferry at dawn"):
        remember(owner, text, now=T0)
    long_term = remember(owner, "the user's name is Lin", now=T0)
    MemoryItem.objects.filter(pk=long_term.pk).update(level=3, long_term=True)

    assert sleep(owner, tenant=tenant, now=at(50), sample=10, rng=random.Random(1)) == ""  # nothing due yet
    assert scripted_llm.requests() == [] and MemoryItem.objects.count() == 4

    dream = sleep(owner, tenant=tenant, now=at(101), sample=10, rng=random.Random(1))

    assert dream == "I dreamt of a lighthouse made of tea."
    assert list(MemoryItem.objects.values_list("text", flat=True)) == ["the user's name is Lin"]
    (request,) = scripted_llm.requests()
    fragments = request["body"]["messages"][-1]["content"].split(strength.DREAM_SEPARATOR)
    assert sorted(fragments) == ["a ferry at dawn", "a lighthouse", "green tea"]
    assert "生成一段梦境" in request["body"]["messages"][0]["content"]
    stored = Dream.objects.get()
    assert (stored.text, sorted(stored.fragments), stored.user_id) == (dream, sorted(fragments), member.pk)
    metric = MemoryMetric.objects.get(agent_id=7)
    assert (metric.dreams, metric.forgotten) == (1, 3)


def test_sleep_draws_only_its_sample(member, tenant, in_tenant, scripted_provider, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "dream"}})
    owner = Owner(user_id=member.pk, key="7_1")
    for number in range(10):
        remember(owner, f"fragment {number}", now=T0)
    sleep(owner, tenant=tenant, now=at(101), sample=4, rng=random.Random(3))
    assert MemoryItem.objects.count() == 6


def test_the_scheduled_sleep_visits_every_tenants_memory_keys(member, other_tenant, tenant, scripted_llm, settings):
    from memory.tasks import sleep_all
    from tenants.scope import tenant_scope
    from tests.factories import UserFactory
    from tests.llm.factories import ModelProviderFactory

    scripted_llm.set_rules({"when": {}, "reply": {"text": "dream"}})
    settings.MEMORY_GAP_SECONDS = 0.001
    stranger = UserFactory()
    old = timezone.now() - dt.timedelta(seconds=5)
    for owner_tenant, user in ((tenant, member), (other_tenant, stranger)):
        with tenant_scope(owner_tenant):
            ModelProviderFactory(tenant=owner_tenant, base_url=scripted_llm.base_url, is_default=True, max_retries=0)
            remember(Owner(user_id=user.pk, key=f"3_{user.pk}"), "a fragment", now=old)
    assert sleep_all.delay(sample=5).get() == 2
    for owner_tenant in (tenant, other_tenant):
        with tenant_scope(owner_tenant):
            assert MemoryItem.objects.count() == 0
            assert Dream.objects.count() == 1

"""Issue 30: the time an event speaks of, a walk that changes what is recalled, and what the reply sees."""

import datetime as dt

import pytest

from agents.services import conversation_start
from memory.longterm import store
from memory.longterm.events import Walked, events_store, events_walk, rule_event, timeline, walk
from memory.longterm.events.walk import timed_events
from memory.longterm.events.when import Period, resolve
from memory.longterm.recall import owner_of
from memory.models import Entity, Event, EventRelation

MONDAY = dt.date(2023, 5, 8)
T0 = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("text", "labels"),
    [
        ("I went to a support group yesterday", ["2023-05-07"]),
        ("We moved here last year", ["2022"]),
        ("the week before we hiked", ["2023-05-01..2023-05-07"]),
        ("I ran a charity race last Saturday", ["2023-05-06"]),
        ("on Friday we painted", ["2023-05-05"]),
        ("last month, and two weeks ago", ["2023-04", "2023-04-24..2023-04-30"]),
        ("3 days ago", ["2023-05-05"]),
        ("It was in May", ["2023-05"]),
        ("in June", ["2022-06"]),  # a month after the day of speaking is last year's
        ("on 8 May, 2023 and in 2021", ["2023-05-08", "2021"]),
        ("last weekend; next month", ["2023-05-06..2023-05-07", "2023-06"]),
        ("去年我去了上海", ["2022"]),
        ("上周我们开会了", ["2023-05-01..2023-05-07"]),
        ("昨天下雨", ["2023-05-07"]),
        ("上周五见面", ["2023-05-05"]),
        ("三个月前", ["2023-02"]),
        ("2023年4月", ["2023-04"]),
        ("I may go; nothing else", []),
    ],
)
def test_time_expressions_resolve_against_the_day_they_were_said(text, labels):
    assert [period.label for period in resolve(text, MONDAY)] == labels


def test_a_time_that_no_calendar_holds_is_no_time_and_no_error():
    # Found by the long Chinese memory set: a message with "0000年" made the rules extraction raise.
    assert [period.label for period in resolve("密码是0000年的那个，10000000天前；昨天", MONDAY)] == ["2023-05-07"]


def test_a_period_label_reads_back():
    for label in ("2023-05-07", "2023-05-01..2023-05-07", "2023-05", "2023"):
        assert Period.parse(label).label == label
    assert Period.parse("Caroline") is None
    assert Period.parse("2023-05").overlaps(Period.parse("2023-05-31..2023-06-06"))


def _say(owner, conversation, text, when, actor="user"):
    outcome = events_store(
        owner, {"new_events": [rule_event(actor=actor, text=text)]}, conversation_id=conversation.pk, now=when,
        link_entities=True,
    )  # fmt: skip
    return outcome.added[0]


@pytest.mark.django_db
def test_events_carry_the_time_they_speak_of_and_a_question_naming_it_finds_them(
    make_agent, member, in_tenant, django_assert_num_queries
):
    agent = make_agent()
    first, second = conversation_start(agent=agent, user=member), conversation_start(agent=agent, user=member)
    owner = owner_of(first)
    museum = _say(owner, first, "Caroline: I went to the museum yesterday with the kids.", T0)
    _say(owner, first, "Melanie: The weather is lovely these days.", T0 + dt.timedelta(minutes=1))
    later = _say(owner, second, "Caroline: Two days ago the kids loved the dinosaurs.", T0 + dt.timedelta(days=1))

    assert {"name": "2023-05-07", "type": "DATE"} in museum.entities
    assert Entity.objects.filter(type="DATE", normalized="2023-05-07").count() == 1
    # The same day spoken of in two sessions links the events (like any shared entity).
    assert EventRelation.objects.filter(source=later, target=museum, kind="refers_to").exists()
    assert "2023" not in museum.terms  # the label is not a keyword of the event

    walked = events_walk(owner, "What did the kids do on 7 May 2023?", top_k=2, depth=0, now=T0 + dt.timedelta(days=9))
    assert set(walked.retrieved_ids) == {museum.pk, later.pk}
    assert timed_events(owner, "What happened in 2019?") == frozenset()  # a time nothing speaks of
    with django_assert_num_queries(0):  # no time named: no query
        assert timed_events(owner, "What did the kids do?") == frozenset()


WEAK = (
    "A storm is a nice thing to watch from a window.",
    "The storm kept the dog awake for hours.",
    "A storm on the roof sounds like a drum.",
)


def _storm(make_agent, member, weak_texts):
    """A hit, weak direct hits in another session, and the hit's cause in a third session (none of its words in
    the question): (owner, query, hit, weak hits, cause)."""
    conversation = conversation_start(agent=make_agent(), user=member)
    owner = owner_of(conversation)
    when = iter(T0 + dt.timedelta(minutes=number) for number in range(100))
    for number in range(12):  # the rest of the memory: nothing to do with the question
        _say(owner, conversation, f"Note {number}: the printer on floor {number} needs paper and toner.", next(when))
    elsewhere = conversation_start(agent=conversation.agent, user=member)
    weak = [_say(owner, elsewhere, text, next(when)) for text in weak_texts]
    hit = _say(owner, conversation, "The harbour of Vigo closed because of the storm Ciaran.", next(when))
    later = conversation_start(agent=conversation.agent, user=member)
    cause = events_store(owner, {
        "new_events": [{"event_id": "n1", "actor": "user", "action_type": "report",
                        "content_summary": "Our copper shipment will arrive three weeks late."}],
        "relations": [{"source": hit.event_id, "type": "causes", "target": "n1"}],
    }, conversation_id=later.pk, now=next(when)).added[0]  # fmt: skip
    query = "Why did the harbour of Vigo close in the storm?"
    ids = [event.pk for event in (*weak, cause)]
    relevance = dict(zip(ids, store.scored(Event, query, user_id=member.pk, key=owner.key).of(ids), strict=True))
    assert min(relevance[event.pk] for event in weak) > relevance[cause.pk]  # by their own words the weak hits win
    return owner, query, hit, weak, cause


@pytest.mark.django_db
def test_a_walked_event_displaces_a_weaker_direct_hit(make_agent, member, in_tenant):
    owner, query, hit, weak, cause = _storm(make_agent, member, WEAK)

    off = events_walk(owner, query, top_k=4, depth=0)
    on = events_walk(owner, query, top_k=4, depth=1)

    assert set(off.retrieved_ids) == {hit.pk, *(event.pk for event in weak)}
    assert cause.pk in on.retrieved_ids  # the cause of the hit took the weakest hit's place (its session keeps two)
    assert len(set(on.retrieved_ids) & {event.pk for event in weak}) == 2


@pytest.mark.django_db
def test_a_walked_event_does_not_push_out_the_only_hit_of_a_session(make_agent, member, in_tenant, monkeypatch):
    owner, query, hit, (weak,), cause = _storm(make_agent, member, WEAK[:1])

    on = events_walk(owner, query, top_k=2, depth=1)
    assert on.retrieved_ids == [hit.pk, weak.pk]  # the weak hit is its session's only one: it stays
    assert cause.pk in [event.pk for event in on.events]  # the cause comes right after, in the walk's room
    monkeypatch.setattr(walk, "LONE_SESSION", 0)  # the fused order alone: the cause takes its place
    assert events_walk(owner, query, top_k=2, depth=1).retrieved_ids == [hit.pk, cause.pk]


@pytest.mark.django_db
def test_the_reply_sees_passages_deduplicated_merged_in_time_order_within_the_budget(make_agent, member, in_tenant):
    agent = make_agent()
    first, second = conversation_start(agent=agent, user=member), conversation_start(agent=agent, user=member)
    owner = owner_of(first)
    ask = _say(owner, first, "Melanie: What are your pets called?", T0)
    pets = _say(
        owner, first, "Caroline: My dog is Luna and my cat is Oliver.", T0 + dt.timedelta(minutes=1), "assistant"
    )
    again = _say(
        owner, second, "Caroline: my dog is Luna and my cat is Oliver. They are sweet.", T0 + dt.timedelta(days=2)
    )
    repeat = _say(owner, second, "Caroline: My dog is Luna", T0 + dt.timedelta(days=2, minutes=1))
    old = _say(owner, second, "Melanie: I had a hamster once.", T0 - dt.timedelta(days=30))
    walked = events_walk(owner, "pets", top_k=5, depth=1)
    relations = [r for r in walked.relations if {r.source_id, r.target_id} <= {ask.pk, pets.pk, again.pk, old.pk}]
    walked = Walked(events=[pets, again, repeat, ask, old], relations=relations, retrieved_ids=[pets.pk, again.pk])

    lines, shown = timeline(walked, budget_tokens=500)

    assert [event.pk for event in shown] == [old.pk, ask.pk, pets.pk, again.pk]  # oldest first, the repeat left out
    assert len(lines) == 3 and lines[1].startswith("2023-05-08 ")  # the question and its answer: one passage
    assert f"[{ask.event_id}]" in lines[1] and f" | [{pets.event_id}]" in lines[1]
    assert "refers_to" not in "".join(lines) and "follows" not in "".join(lines)

    lines, shown = timeline(walked, budget_tokens=45)  # room for the best event only
    assert [event.pk for event in shown] == [pets.pk] and len(lines) == 1

"""A long message kept as its statements (issue 38, point 2; off by default, `rules.SPLIT_AT` 0, because it did not pay
on the long user–assistant set: docs/memory.md): with it on, a fact deep in a long assistant answer or a long user
turn is an event of its own, found by itself, and short messages stay one event. Real turns through the rules
extraction, real jieba and the local embedder."""

import itertools

import pytest

from agents.services import conversation_start
from memory.longterm.events import events_walk, excerpts, rules, statements
from memory.longterm.extraction import turn_memory_extract
from memory.longterm.recall import owner_of
from memory.models import Event, EventRelation
from memory.services import message_add

TIPS = (
    "Establishing a routine takes patience and a few habits that reinforce each other over the weeks. "
    "Try to go to bed at the same time every night, even on weekends, so that your body learns the rhythm. "
    "Keep the bedroom cool, dark and quiet, and leave the phone in another room if you can manage it. "
    "Avoid heavy meals and caffeine in the evening, since both keep the body busy when it should rest. "
)
FACT = "Since you said your daughter Mia starts violin lessons at the conservatory on Tuesdays, plan the evening early."


@pytest.fixture
def splitting(monkeypatch):
    monkeypatch.setattr(rules, "SPLIT_AT", 500)
    monkeypatch.setattr(rules, "STATEMENT_CHARS", 300)


def test_off_by_default_a_long_message_is_one_event_of_its_first_characters():
    assert rules.SPLIT_AT == 0
    assert statements(TIPS * 3 + FACT) == [" ".join((TIPS * 3).split())[: rules.SUMMARY_CHARS]]


@pytest.mark.usefixtures("splitting")
def test_a_short_message_is_one_statement_and_a_long_one_is_cut_at_sentence_ends():
    assert statements("  I moved to   Lyon last spring. ") == ["I moved to Lyon last spring."]
    assert statements("") == []

    long = TIPS * 2 + FACT
    pieces = statements(long)
    assert len(pieces) >= 3
    assert all(excerpts.width(piece) <= rules.STATEMENT_CHARS for piece in pieces)
    assert " ".join(pieces) == " ".join(long.split())  # nothing lost, nothing reordered, no 500-character cut
    assert pieces[-1].endswith(FACT)

    chinese = "我们先聊聊作息。" * 30 + "你说过女儿周二在音乐学院上小提琴课。" + "睡前少看手机。" * 30
    parts = statements(chinese)
    assert len(parts) >= 3 and all(" " not in part for part in parts)  # Chinese sentences joined without spaces
    assert any("女儿周二在音乐学院上小提琴课" in part for part in parts)


@pytest.mark.django_db
@pytest.mark.usefixtures("splitting")
def test_a_fact_deep_in_a_long_answer_is_its_own_event_and_is_found(make_agent, member, in_tenant):
    agent = make_agent()
    conversation = conversation_start(agent=agent, user=member)
    question = message_add(conversation=conversation, role="user", content="How do I keep a steady evening routine?")
    answer = message_add(conversation=conversation, role="assistant", content=TIPS * 2 + FACT + " " + TIPS)
    assert turn_memory_extract(
        conversation=conversation, user_message_id=question.pk, reply_message_id=answer.pk, mode="rules"
    ) == "stored"  # fmt: skip

    asked, *said = Event.objects.order_by("id")
    assert asked.action_type == "query" and len(said) >= 3
    assert {event.actor for event in said} == {"assistant"} and {tuple(e.source_message_ids) for e in said} == {
        (answer.pk,)
    }
    assert all(event.action_type == "answer" for event in said)
    holding = next(event for event in said if "violin" in event.content_summary)
    assert holding.content_summary != said[0].content_summary  # not the answer's first 500 characters
    follows = set(EventRelation.objects.filter(kind="follows").values_list("source_id", "target_id"))
    assert {(said[0].pk, asked.pk), *((b.pk, a.pk) for a, b in itertools.pairwise(said))} <= follows

    walked = events_walk(owner_of(conversation), "When are Mia's violin lessons?", top_k=3, depth=0)
    assert walked.events[0].pk == holding.pk


@pytest.mark.django_db
@pytest.mark.usefixtures("splitting")
def test_a_long_user_turn_that_ends_in_a_question_is_a_query_only_at_its_end(make_agent, member, in_tenant):
    agent = make_agent()
    conversation = conversation_start(agent=agent, user=member)
    text = "My partner Sam and I are renovating the kitchen of our flat in Leeds this month. " * 8 + "Any tips?"
    message = message_add(conversation=conversation, role="user", content=text)
    turn_memory_extract(conversation=conversation, user_message_id=message.pk, reply_message_id=None, mode="rules")

    actions = list(Event.objects.order_by("id").values_list("action_type", flat=True))
    assert len(actions) >= 2 and actions[-1] == "query" and set(actions[:-1]) == {"report"}

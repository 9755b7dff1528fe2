"""Issue 38, point 2: a message about the user ranks the user's own words above the assistant's."""

import datetime as dt

import pytest

from agents.services import conversation_start
from memory.longterm import store
from memory.longterm.events import events_store, events_walk, rule_event, walk
from memory.longterm.events.walk import about_the_user
from memory.longterm.recall import owner_of
from memory.models import Event

T0 = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("message", "about"),
    [
        ("Which instrument do I like to spend time on?", True),
        ("Stage fright is back for that talk of mine.", True),
        ("Can you suggest a recipe for my parents?", True),  # a request, not what the assistant said
        ("Do you remember me saying what I saw in the park?", True),
        ("我平时爱摆弄哪种乐器？", True),
        ("你还记得我那天在花丛边看到了什么吗？", True),
        ("What painters did you recommend to me?", False),  # what the assistant said
        ("What methods have you told me about for relieving stress?", False),
        ("You once recommended a game to me. What was its name?", False),
        ("Which movies did you share with me?", False),
        ("你给我推荐过哪些书？", False),
        ("在5月2号我们聊了很多，我们聊了哪些话题？", False),  # 我们, we: not the user alone
        ("What did Caroline research?", False),  # a third person
        ("When is the meeting?", False),
    ],
)
def test_a_message_about_the_user_is_told_from_one_about_what_the_assistant_said(message, about):
    assert about_the_user(message) is about


def _say(owner, conversation, text, minutes, actor):
    said = {"new_events": [rule_event(actor=actor, text=text)]}
    when = T0 + dt.timedelta(minutes=minutes)
    return events_store(owner, said, conversation_id=conversation.pk, now=when).added[0]


def _history(make_agent, member):
    """The user's fact, the assistant's remark on the topic, a little closer to the question by its words (in another
    conversation: it answers nothing of the user's), and other talk of evenings."""
    conversation = conversation_start(agent=make_agent(), user=member)
    owner = owner_of(conversation)
    for number in range(40):  # the rest of the memory, enough rows that the scores are not all extremes
        _say(owner, conversation, f"Note {number}: the evening train on line {number} was late again.", number, "user")
    mine = _say(owner, conversation, "I play the piano every evening.", 50, "user")
    elsewhere = conversation_start(agent=conversation.agent, user=member)
    theirs = _say(owner, elsewhere, "Playing the piano in the evening is a good way to relax.", 60, "assistant")
    return owner, mine, theirs


@pytest.mark.django_db
def test_the_users_own_words_rank_above_the_assistants_for_a_message_about_the_user(
    make_agent, member, in_tenant, monkeypatch
):
    owner, mine, theirs = _history(make_agent, member)
    query = "Which instrument do I play in the evening?"
    assert set(store.collection(Event, user_id=member.pk, key=owner.key).marked.tolist()) == {theirs.pk}

    assert events_walk(owner, query, top_k=2, depth=0).retrieved_ids == [mine.pk, theirs.pk]
    monkeypatch.setattr(walk, "ASSISTANT_PENALTY", 0.0)  # by their words alone the assistant's answer wins
    assert events_walk(owner, query, top_k=2, depth=0).retrieved_ids == [theirs.pk, mine.pk]


@pytest.mark.django_db
def test_a_question_about_what_the_assistant_said_keeps_the_assistants_words(make_agent, member, in_tenant):
    owner, mine, theirs = _history(make_agent, member)
    walked = events_walk(owner, "Which instrument did you tell me to play in the evening?", top_k=2, depth=0)
    assert walked.retrieved_ids == [theirs.pk, mine.pk]


@pytest.mark.django_db
def test_rows_added_and_deleted_keep_the_collections_marks(make_agent, member, in_tenant):
    owner, mine, theirs = _history(make_agent, member)
    assert store.collection(Event, user_id=member.pk, key=owner.key).marked.tolist() == [theirs.pk]
    conversation = conversation_start(agent=Event.objects.get(pk=mine.pk).conversation.agent, user=member)
    later = _say(owner, conversation, "Playing scales every evening builds the fingers' strength.", 20, "assistant")
    grown = store.collection(Event, user_id=member.pk, key=owner.key)  # the new row read alone, as a segment
    assert len(grown.segments) == 2
    assert grown.marked.tolist() == [theirs.pk, later.pk]
    Event.objects.filter(pk=theirs.pk).delete()
    assert store.collection(Event, user_id=member.pk, key=owner.key).marked.tolist() == [later.pk]  # rebuilt

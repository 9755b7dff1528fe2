"""What recall searches for (issue 38, point 2): a short chat message that points back is read with the user's message
before it, so "what was her job again?" finds what the conversation is about; a message that says enough is searched
alone, with no statement read for it. Real messages, real rules extraction and recall."""

import pytest

from agents.services import conversation_start
from memory.longterm.events import events_walk
from memory.longterm.extraction import turn_memory_extract
from memory.longterm.recall import RECENT_WIDTH, owner_of, recall_for_turn, recall_query
from memory.services import message_add


def _remember(agent, member, text):
    conversation = conversation_start(agent=agent, user=member)
    message = message_add(conversation=conversation, role="user", content=text)
    turn_memory_extract(conversation=conversation, user_message_id=message.pk, reply_message_id=None, mode="rules")


@pytest.mark.django_db
def test_a_short_message_is_searched_with_the_users_message_before_it(make_agent, member, in_tenant):
    agent = make_agent()
    _remember(agent, member, "My sister Anna works night shifts as a nurse at the Boston children's hospital.")
    _remember(agent, member, "My brother Tom's job is repairing vintage motorbikes in his garage.")
    conversation = conversation_start(agent=agent, user=member)
    message_add(conversation=conversation, role="user", content="I have been worried about Anna lately.")
    message_add(conversation=conversation, role="assistant", content="I'm sorry to hear that. What happened?")
    short = message_add(conversation=conversation, role="user", content="what was her job again?")

    before = "I have been worried about Anna lately."
    assert recall_query(conversation, short.content) == f"{before}\n{short.content}"
    owner = owner_of(conversation)
    alone = events_walk(owner, short.content, top_k=2, depth=0).events
    read = events_walk(owner, recall_query(conversation, short.content), top_k=2, depth=0).events
    assert "motorbikes" in alone[0].content_summary  # "job" alone finds the brother
    assert "nurse" in read[0].content_summary  # with the message before it, the sister
    assert any("nurse" in line for line in recall_for_turn(conversation, short.content).lines)


@pytest.mark.django_db
def test_a_message_that_says_enough_is_searched_alone(make_agent, member, in_tenant, django_assert_num_queries):
    agent = make_agent()
    conversation = conversation_start(agent=agent, user=member)
    message_add(conversation=conversation, role="user", content="I have been worried about Anna lately.")
    long = "Could you remind me which hospital my sister works at and whether she still does the night shifts?"
    named = "Which locker code did I give you?"  # short, but it names what it asks about
    assert len(long) > RECENT_WIDTH >= len(named)
    with django_assert_num_queries(0):
        assert recall_query(conversation, long) == long
        assert recall_query(conversation, named) == named
    first = conversation_start(agent=agent, user=member)
    opening = message_add(conversation=first, role="user", content="is that still true?")
    assert recall_query(first, opening.content) == opening.content  # nothing before it

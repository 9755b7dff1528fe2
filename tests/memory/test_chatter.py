"""Acknowledgements, thanks, greetings and laughter are no events in the rules extraction (issue 38, point 3: stored
chatter must not crowd out the user's facts); the turn itself is still indexed. Real turns through the rules
extraction and the local embedders."""

import pytest

from agents.services import conversation_start
from memory.longterm.events import events_walk, rule_events
from memory.longterm.events.rules import is_chatter
from memory.longterm.extraction import turn_memory_extract
from memory.longterm.recall import owner_of
from memory.models import Event, TurnMemory
from memory.services import message_add

CHATTER = ["OK, thanks!", "Thank you so much 😊", "好的，谢谢！", "哈哈哈", "嗯嗯 收到", "不客气～", "Got it, will do."]
NOT_CHATTER = [
    "No.",  # an answer is a fact in its context
    "Yes",
    "我对花生过敏",
    "Thanks, I love hiking",
    "好的，明天下午三点见",
    "Hi Mel!",
    "No problem, I moved the meeting to Friday.",
    "ok " * 30,  # wider than CHATTER_CHARS
]


@pytest.mark.parametrize("text", CHATTER)
def test_chatter_is_no_event(text):
    assert is_chatter(text)
    assert rule_events(actor="user", text=text) == []


@pytest.mark.parametrize("text", NOT_CHATTER)
def test_a_message_with_content_is_kept(text):
    assert not is_chatter(text)
    assert len(rule_events(actor="user", text=text)) == 1


def _exchange(conversation, user: str, reply: str) -> None:
    question = message_add(conversation=conversation, role="user", content=user)
    answer = message_add(conversation=conversation, role="assistant", content=reply)
    assert (
        turn_memory_extract(
            conversation=conversation, user_message_id=question.pk, reply_message_id=answer.pk, mode="rules"
        )
        == "stored"
    )


@pytest.mark.django_db
def test_a_users_fact_is_not_crowded_out_by_acknowledgements(make_agent, member, in_tenant):
    agent = make_agent()
    conversation = conversation_start(agent=agent, user=member)
    _exchange(conversation, "我女儿每周六上午去少年宫学钢琴。", "好的，我记住了：周六上午钢琴课。")
    for number in range(12):  # "好的，谢谢！" / "嗯嗯 收到", "哈哈哈" / "不客气～" ...
        _exchange(conversation, CHATTER[number % 3], CHATTER[3 + number % 3])

    stored = list(Event.objects.values_list("content_summary", flat=True))
    assert stored == ["我女儿每周六上午去少年宫学钢琴。", "好的，我记住了：周六上午钢琴课。"]
    assert TurnMemory.objects.count() == 13  # every turn is still indexed
    walked = events_walk(owner_of(conversation), "孩子周末有什么课？", top_k=10, depth=0)
    assert sorted(event.content_summary for event in walked.events) == sorted(stored)  # the fact, no chatter

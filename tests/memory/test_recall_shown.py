"""What the reply sees of a long event (issue 38): the sentences around what matches the query, English and
Chinese, so more events fit the budget; real events stored through the rules extraction, real jieba and tiktoken."""

import datetime as dt

import pytest

from agents.services import conversation_start
from memory.longterm.events import events_store, events_walk, excerpts, passages, rule_event, timeline
from memory.longterm.recall import owner_of

T0 = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.UTC)
FILLER_EN = "We talked about the weather and the traffic on the way home for a while. " * 3
FILLER_ZH = "今天的天气一般，路上车很多，我们聊了很久别的事情。" * 4


def test_sentences_split_at_english_and_chinese_punctuation():
    assert excerpts.sentences("It costs 3.5 euros. Cheap! Really? Yes; fine") == [
        "It costs 3.5 euros.",
        "Cheap!",
        "Really?",
        "Yes;",
        "fine",
    ]
    assert excerpts.sentences("我去了北京。天气很好！你呢？还行；然后…回家了") == [
        "我去了北京。",
        "天气很好！",
        "你呢？",
        "还行；",
        "然后…",
        "回家了",
    ]


def test_an_excerpt_keeps_the_matching_sentence_and_marks_the_cut():
    text = FILLER_EN + "My sister Anna works as a nurse in Boston. " + FILLER_EN
    cut = excerpts.excerpt(text, excerpts.query_terms("What does your sister do?"), limit=80)
    assert "My sister Anna works as a nurse in Boston." in cut
    assert cut.startswith("…") and cut.endswith("…") and excerpts.width(cut) <= 80 + 2
    assert excerpts.excerpt("Short.", frozenset({"short"}), limit=80) == "Short."

    chinese = FILLER_ZH + "我最喜欢的菜系是川菜，尤其是麻婆豆腐。" + FILLER_ZH
    cut = excerpts.excerpt(chinese, excerpts.query_terms("我喜欢哪些菜系？"), limit=80)
    assert "我最喜欢的菜系是川菜，尤其是麻婆豆腐。" in cut and " " not in cut  # Chinese joined without spaces
    assert excerpts.width(cut) <= 80 + 2  # a Chinese character counts CJK_WIDTH letters

    nothing = excerpts.excerpt(text, excerpts.query_terms("quantum chromodynamics"), limit=80)
    assert nothing.startswith("We talked about the weather") and nothing.endswith("…")  # no match: the start


def _say(owner, conversation, text, when, actor="user"):
    outcome = events_store(
        owner, {"new_events": [rule_event(actor=actor, text=text)]}, conversation_id=conversation.pk, now=when
    )
    return outcome.added[0]


@pytest.mark.django_db
def test_long_events_are_cut_around_the_query_so_more_of_them_fit(make_agent, member, in_tenant, monkeypatch):
    agent = make_agent()
    owner = owner_of(conversation_start(agent=agent, user=member))
    facts = ["My sister Anna is a nurse.", "My sister Bea plays the cello.", "My sister Cleo studies law."]
    stored = []
    for day, fact in enumerate(facts):
        conversation = conversation_start(agent=agent, user=member)
        stored.append(_say(owner, conversation, FILLER_EN + fact + " " + FILLER_EN[:200], T0 + dt.timedelta(days=day)))
    walked = events_walk(owner, "Which sister is a nurse or plays the cello or studies law?", top_k=5, depth=0)
    assert walked.query.startswith("Which sister")

    lines, shown = timeline(walked, budget_tokens=160)
    monkeypatch.setattr(passages, "EXCERPT_CHARS", 10_000)  # whole events, as before issue 38
    _, whole = timeline(walked, budget_tokens=160)

    assert len(shown) == 3 and len(whole) < 3  # cut around the query, all three fit where whole ones did not
    assert all(any(fact in line for line in lines) for fact in facts)
    assert all(f"[{event.event_id}]" in "".join(lines) for event in stored)

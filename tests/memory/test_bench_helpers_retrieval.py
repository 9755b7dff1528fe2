"""What bench/memory_recall.py measured into memory retrieval: the keyword query of a conversation, the answer that
follows a question, and the bench's own reading of LoCoMo."""

import datetime as dt
import importlib.util
import sys
from pathlib import Path

from agents.services import conversation_start
from memory.longterm import store
from memory.longterm.events import events_store, events_walk, rule_event
from memory.longterm.recall import owner_of
from memory.models import Event

T0 = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.UTC)


def test_english_words_fold_past_the_plural_and_question_words_leave_the_keyword_query():
    assert [store.fold(word) for word in ("researching", "researched", "agencies", "hopping", "this")] == [
        "research", "research", "agenci", "hop", "this",
    ]  # fmt: skip
    assert store.keyword_query("What did Caroline research?").split() == ["caroline", "research?"]
    assert store.keyword_query("what is it?").split() == ["what", "is", "it?"]  # nothing else: kept as it was
    assert "订单" in store.keyword_query("客户C的订单为什么可能延迟？")


def test_the_answer_after_a_question_is_recalled_though_it_repeats_none_of_its_words(make_agent, member, in_tenant):
    conversation = conversation_start(agent=make_agent(), user=member)
    owner = owner_of(conversation)
    lines = [
        ("user", "Melanie: I took the kids to the museum yesterday, they loved the dinosaur bones."),
        ("assistant", "Caroline: That sounds fun! Which pets do you have at home, and what are their names?"),
        ("user", "Melanie: Luna and Oliver! Two cats, so sweet and playful."),
        ("assistant", "Caroline: I'm going to a pride parade next week."),
        ("user", "Melanie: Pottery class was great, I made a bowl."),
    ]
    events = []
    for number, (actor, text) in enumerate(lines):
        stored = events_store(
            owner, {"new_events": [rule_event(actor=actor, text=text)]}, conversation_id=conversation.pk,
            now=T0 + dt.timedelta(minutes=number), link_entities=True,
        )  # fmt: skip
        events.append(stored.added[0])
    question, answer = events[1], events[2]
    assert question.action_type == "query"

    query = "What are the names of Melanie's pets?"
    relevance = dict(store.rank(Event, query, top_k=5, user_id=owner.user_id, key=owner.key))
    assert max(relevance, key=relevance.get) == question.pk  # by its words, the question matches best

    walked = events_walk(owner, query, top_k=1, depth=1)

    assert walked.retrieved_ids == [answer.pk]  # the answer takes the question's relevance
    assert [event.pk for event in walked.events][:2] == [answer.pk, question.pk]


def _bench(monkeypatch):
    """bench/memory_recall.py as a module (only its helpers run: the benchmark is run by hand)."""
    path = Path(__file__).resolve().parents[2] / "bench" / "memory_recall.py"
    monkeypatch.setattr(sys, "path", list(sys.path))  # the bench puts bench/ on the path for its neighbours
    spec = importlib.util.spec_from_file_location("memory_recall_bench", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_bench_reads_locomo_dates_evidence_and_photos(monkeypatch):
    bench = _bench(monkeypatch)
    assert bench.session_date("1:56 pm on 8 May, 2023") == T0
    assert bench.evidence_ids(["D8:6; D9:17", "D1:3"]) == {"D8:6", "D9:17", "D1:3"}
    turn = {"speaker": "Caroline", "text": " Look! ", "blip_caption": "a photo of a mural"}
    assert bench.turn_content(turn) == "Caroline: Look! [shares a photo of a mural]"

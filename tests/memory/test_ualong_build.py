"""The long user–assistant sets (issue 38): bench/ualong_build.py buries each MemoryBank user's days, converted as
bench/memorybank_build.py converts them, among filler sessions of real chats that are never evidence. Run on the
committed made-up samples bench/data/memorybank_sample/ and bench/data/ualong_sample/."""

import datetime as dt
import json
import random
import re

import pytest

from tests.memory.test_memory_sets import _module


@pytest.fixture
def ualong(monkeypatch):
    return _module(monkeypatch, "ualong_build")


def _sessions(row: dict) -> list[tuple[dt.datetime, list[dict]]]:
    conversation = row["conversation"]
    numbers = sorted(int(key.split("_")[1]) for key in conversation if re.fullmatch(r"session_\d+", key))
    when = (dt.datetime.strptime(conversation[f"session_{n}_date_time"], "%I:%M %p on %d %B, %Y") for n in numbers)
    return list(zip(when, (conversation[f"session_{n}"] for n in numbers), strict=True))


def test_longmemeval_gives_only_its_real_chats_each_opening_with_the_user(ualong):
    filler = ualong.read_longmemeval(ualong.SAMPLE / "longmemeval_sample.json")

    assert [session.source for session in filler] == ["sharegpt_madeup_0", "ultrachat_000001", "sharegpt_madeup_1"]
    assert all(session.turns[0][0] == "user" for session in filler)
    assert filler[1].turns[0][1].startswith("What are some good ways to reduce the energy use")  # its greeting dropped


def test_cmrc_sessions_ask_a_paragraphs_questions_and_answer_with_it(ualong):
    filler = ualong.read_cmrc(ualong.SAMPLE / "cmrc")

    bridge = filler[0]
    assert bridge.source == "cmrc_P_0" and [role for role, _ in bridge.turns] == ["user", "assistant"] * 2
    assert bridge.turns[0][1] == "青石桥建于什么时候？"
    assert bridge.turns[1][1].startswith("清朝末年。青石桥是一座虚构的石拱桥")
    assert bridge.turns[1][1] != bridge.turns[3][1]  # the gold answer first: no two answers the same text


def test_the_users_days_and_questions_are_memorybanks_among_filler_in_order_of_time(ualong, tmp_path):
    mb = ualong.mb
    filler = ualong.read_longmemeval(ualong.SAMPLE / "longmemeval_sample.json")
    rows = ualong.build(mb.SAMPLE, filler, mb.Language.EN, tmp_path / "ualong_en.json")
    plain = mb.build(mb.SAMPLE, mb.Language.EN, tmp_path / "memorybank_en.json")

    assert [(row["sample_id"], row["split"]) for row in rows] == [("ul-en-01", "dev"), ("ul-en-02", "check")]
    for row, original in zip(rows, plain, strict=True):
        assert row["qa"] == original["qa"]
        sessions = _sessions(row)
        assert [when for when, _ in sessions] == sorted(when for when, _ in sessions)
        turns = {turn["dia_id"]: turn for _, session in sessions for turn in session}
        days = {turn["dia_id"]: turn for key, session in original["conversation"].items()
                if re.fullmatch(r"session_\d+", key) for turn in session}  # fmt: skip
        assert {dia: turn for dia, turn in turns.items() if dia.startswith("D")} == days
        filler_ids = [dia for dia in turns if dia.startswith("F")]
        assert len(filler_ids) == 8  # all the sample's filler, each session once
        assert not {dia for qa in row["qa"] for dia in qa["evidence"]} & set(filler_ids)
        first_day = next(when for when, session in sessions if session[0]["dia_id"].startswith("D"))
        assert first_day == dt.datetime(2023, 4, 27, 9, 0)


def test_a_user_stops_taking_filler_at_its_turn_target(ualong):
    filler = [ualong.Filler(f"s{n}", (("user", "hi"), ("assistant", "hello"))) for n in range(50)]
    day = [{"speaker": "Ann", "dia_id": "D1:1", "text": "I like tea."}]
    row = {"conversation": {"speaker_a": "Ann", "speaker_b": "AI companion", "session_1": day,
                            "session_1_date_time": "9:00 am on 27 April, 2023"}, "qa": []}  # fmt: skip

    built = ualong.interleave(row, filler, random.Random(1), 11)

    sessions = _sessions(built)
    assert sum(len(session) for _, session in sessions) == 11  # the day's turn and five filler sessions of two
    assert sessions[0][0] >= dt.datetime(2023, 4, 17, 9, 0) and sessions[-1][0] <= dt.datetime(2023, 5, 7, 9, 0)


def _row(sample_id: str, dia_ids: list[str]) -> dict:
    turns = [{"speaker": "A", "dia_id": dia_id, "text": "x"} for dia_id in dia_ids]
    return {"sample_id": sample_id, "split": "dev", "conversation": {"session_1": turns}, "qa": [{"question": "old"}]}


def test_topic_questions_replace_memorybanks_where_their_evidence_is_there(ualong, tmp_path):
    asked = tmp_path / "topic.json"
    asked.write_text(
        '{"questions": ['
        '{"user": "ul-en-01", "question": "Which instrument?", "evidence": ["D1:3"], "category": 4},'
        '{"user": "ul-en-01", "question": "Which fish?", "evidence": ["D3:1", "D9:9"], "category": 1},'
        '{"user": "ul-en-03", "question": "Which singer?", "evidence": ["D3:3"], "category": 4}]}'
    )
    rows = [_row("ul-en-01", ["D1:3", "D3:1", "F2:1"]), _row("ul-en-02", ["D1:1"]), _row("ul-en-03", ["D1:1"])]

    topic, dropped = ualong.with_topic_questions(rows, asked)

    assert [row["sample_id"] for row in topic] == ["ul-en-01"]  # users left without a question are left out
    assert topic[0]["qa"] == [{"question": "Which instrument?", "answer": "", "evidence": ["D1:3"], "category": 4}]
    assert topic[0]["conversation"] == rows[0]["conversation"] and dropped == 2


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_committed_topic_questions_are_well_formed(ualong, language):
    path = ualong.TOPIC_QUESTIONS[ualong.mb.Language.EN if language == "en" else ualong.mb.Language.ZH]
    questions = json.loads(path.read_text(encoding="utf-8"))["questions"]
    assert {item["user"] for item in questions} == {f"ul-{language}-{number:02d}" for number in range(1, 16)}
    assert len(questions) == 60
    for item in questions:
        assert item["category"] in (1, 4)
        assert all(re.fullmatch(r"D\d+:\d+", dia_id) for dia_id in item["evidence"])  # never a filler turn
        assert (len(item["evidence"]) > 1) == (item["category"] == 1)

"""The reply inside seed 2's combined JSON answer, streamed piece by piece (agents.replyjson)."""

import json

import pytest

from agents.replyjson import ReplyField, reply_of

REPLY = 'Line one\nsays "hi" — 台风 🌀 \\ done'
ANSWER = json.dumps(
    {"user_reply": REPLY, "new_events": [{"event_id": "n1", "actor": "user", "action_type": "report",
                                          "content_summary": "x"}]}
)  # fmt: skip


def _stream(answer: str, size: int) -> tuple[ReplyField, list[str]]:
    field = ReplyField()
    shown = [field.feed(answer[i : i + size]) for i in range(0, len(answer), size)]
    shown.append(field.close())
    return field, shown


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64, 10_000])
def test_only_the_reply_is_shown_whatever_the_pieces(size):
    field, shown = _stream(ANSWER, size)
    assert "".join(shown) == REPLY
    assert field.complete and reply_of(ANSWER, field) == REPLY


def test_escaped_unicode_and_surrogate_pairs_are_decoded_across_pieces():
    answer = json.dumps({"user_reply": "台风 🌀"}, ensure_ascii=True)  # \u53f0\u98ce \ud83c\udf00
    assert "\\ud83c" in answer
    for size in range(1, 8):
        _field, shown = _stream(answer, size)
        assert "".join(shown) == "台风 🌀"


def test_the_reply_streams_before_the_events_arrive():
    field = ReplyField()
    assert field.feed('  {"user_reply": "Hel') == "Hel"
    assert field.feed('lo", "new_events": [{"content_summary": "not shown"}') == "lo"
    assert field.complete and field.feed("]}") == ""


def test_a_fenced_answer_and_a_reply_that_is_not_first():
    answer = '```json\n{"new_events": [], "note": "user_reply", "user_reply": "Late but shown"}\n```'
    field, shown = _stream(answer, 4)
    assert "".join(shown) == "Late but shown"
    assert reply_of(answer, field) == "Late but shown"


def test_a_key_named_user_reply_inside_an_event_is_not_the_reply():
    answer = '{"new_events": [{"user_reply": "inner"}], "user_reply": "outer"}'
    _field, shown = _stream(answer, 3)
    assert "".join(shown) == "outer"


def test_prose_instead_of_json_passes_through():
    answer = "I could not answer in JSON, sorry."
    field, shown = _stream(answer, 5)
    assert "".join(shown) == answer and field.passthrough
    assert reply_of(answer, field) == answer


def test_a_cut_answer_keeps_the_reply_that_arrived_whole():
    answer = '{"user_reply": "Kept whole", "new_events": [{"event_id": "n1", "act'
    field, shown = _stream(answer, 6)
    assert "".join(shown) == "Kept whole" and reply_of(answer, field) == "Kept whole"


def test_json_without_a_reply_gives_the_answer_itself():
    answer = '{"new_events": []}'
    field, shown = _stream(answer, 3)
    assert "".join(shown) == "" and reply_of(answer, field) == answer

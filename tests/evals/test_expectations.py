"""Every expectation kind, passing and failing (issue 39), and validate's refusals naming the field."""

from __future__ import annotations

import pytest

from evals.expectations import ExpectationError, Observed, ToolCalled, Verdict, check, is_question, is_refusal, validate

# (expectation, an observed reply that passes, one that fails)
CASES = [
    ({"kind": "contains", "text": "south"}, Observed("Face it SOUTH."), Observed("Face it north.")),
    (
        {"kind": "contains", "text": "South", "ignore_case": False},
        Observed("South is best."),
        Observed("south is best."),
    ),
    ({"kind": "not_contains", "text": "north"}, Observed("South."), Observed("NORTH is wrong.")),
    ({"kind": "equals", "text": "42"}, Observed(" 42\n"), Observed("42.")),
    ({"kind": "equals", "text": "Yes", "ignore_case": True}, Observed("yes"), Observed("yes!")),
    ({"kind": "matches", "pattern": r"\d+ ?kW"}, Observed("About 5 kW."), Observed("About five.")),
    ({"kind": "matches", "pattern": "^ok", "ignore_case": True}, Observed("OK then"), Observed("not ok")),
    (
        {
            "kind": "json_schema",
            "schema": {"type": "object", "required": ["kw"], "properties": {"kw": {"type": "number"}}},
        },
        Observed('Here:\n```json\n{"kw": 5}\n```'),
        Observed('{"kw": "five"}'),
    ),
    ({"kind": "json_schema", "schema": {"type": "array"}}, Observed("[1, 2]"), Observed("no json here")),
    (
        {"kind": "tool_called", "name": "get_weather", "arguments": {"city": "Paris"}},
        Observed("", tool_calls=(ToolCalled("get_weather", {"city": " paris", "days": 2}),)),
        Observed("", tool_calls=(ToolCalled("get_weather", {"city": "Rome"}),)),
    ),
    (
        {"kind": "tool_called", "name": "get_weather"},
        Observed("", tool_calls=(ToolCalled("clock", {}), ToolCalled("get_weather", {}))),
        Observed("", tool_calls=(ToolCalled("clock", {}),)),
    ),
    (
        {"kind": "cited", "source": "menu"},
        Observed("x", citations=("menu.pdf",)),
        Observed("x", citations=("wine.pdf",)),
    ),
    ({"kind": "cited"}, Observed("x", citations=("a.pdf",)), Observed("x")),
    ({"kind": "refusal"}, Observed("抱歉，我无法提供这个信息。"), Observed("当然，答案是 42。")),
    ({"kind": "refusal"}, Observed("I can't help with that."), Observed("Sure, here it is: you cannot miss it.")),
    ({"kind": "refusal"}, Observed("", finish_reason="content_filter"), Observed("Fine.")),
    ({"kind": "question"}, Observed("Which city are you in?"), Observed("It is sunny in Paris.")),
    ({"kind": "question"}, Observed("请问您在哪个城市？🙂"), Observed("巴黎今天晴。")),
    ({"kind": "question"}, Observed("I need more detail. Please provide your roof's area."), Observed("Done. Enjoy!")),
]


@pytest.mark.parametrize(
    ("expectation", "passing", "failing"), CASES, ids=lambda v: v.get("kind") if isinstance(v, dict) else ""
)
def test_each_kind_passes_and_fails(expectation, passing, failing):
    passed = check(expectation, passing)
    failed = check(expectation, failing)
    assert isinstance(passed, Verdict) and passed.passed and passed.kind == expectation["kind"], passed
    assert not failed.passed and failed.detail, failed
    assert failed.as_json() == {"kind": expectation["kind"], "passed": False, "detail": failed.detail}


def test_validate_fills_defaults_and_keeps_only_the_kinds_fields():
    assert validate({"kind": "contains", "text": "a"}) == {"kind": "contains", "text": "a", "ignore_case": True}
    assert validate({"kind": "equals", "text": "a"}) == {"kind": "equals", "text": "a", "ignore_case": False}
    assert validate({"kind": "rubric", "rubric": " polite "}) == {"kind": "rubric", "rubric": "polite", "min_score": 4}
    assert validate({"kind": "cited", "source": ""}) == {"kind": "cited"}
    assert validate({"kind": "refusal"}) == {"kind": "refusal"}


@pytest.mark.parametrize(
    ("expectation", "field"),
    [
        ("contains", "kind"),
        ({"kind": "sings"}, "kind"),
        ({"kind": "contains"}, "text"),
        ({"kind": "contains", "text": "  "}, "text"),
        ({"kind": "contains", "txt": "a"}, "txt"),
        ({"kind": "contains", "text": "a", "ignore_case": "yes"}, "ignore_case"),
        ({"kind": "matches", "pattern": "(unclosed"}, "pattern"),
        ({"kind": "json_schema", "schema": {"type": "thing"}}, "schema"),
        ({"kind": "json_schema", "schema": "object"}, "schema"),
        ({"kind": "tool_called", "name": ""}, "name"),
        ({"kind": "tool_called", "name": "x", "arguments": [1]}, "arguments"),
        ({"kind": "rubric", "rubric": "ok", "min_score": 6}, "min_score"),
        ({"kind": "rubric", "rubric": "ok", "min_score": True}, "min_score"),
        ({"kind": "refusal", "text": "no"}, "text"),
    ],
)
def test_validate_refuses_naming_the_field(expectation, field):
    with pytest.raises(ExpectationError) as raised:
        validate(expectation)
    assert raised.value.field == field
    assert f"'{field}'" in str(raised.value)


def test_a_rubric_needs_the_judge():
    with pytest.raises(ValueError, match="check_all"):
        check({"kind": "rubric", "rubric": "polite"}, Observed("hi"))


def test_the_heuristics_look_where_they_should():
    # A refusal word late in the reply is not a refusal; a question mark in the middle is not a question back.
    assert not is_refusal(Observed("Here is the plan for your roof. " * 8 + "Sorry for the length."))
    assert is_refusal(Observed("", refused=True))
    assert not is_question("Did you know? Panels last 25 years.")
    assert is_question("Panels last 25 years. Which brand do you have?")

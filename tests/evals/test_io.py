"""Cases in and out of CSV and JSONL files (issue 39): every problem points at its line and field, a BOM or none,
and an export imports back into the same cases."""

from __future__ import annotations

import pytest

from evals.io import export_csv, export_jsonl, parse_cases
from evals.services import case_create, cases_import, dataset_create
from tenants.scope import tenant_scope

CSV_OK = (
    "title,input,expected_contains,expected_not_contains,expected_pattern,expected_equals,expected_tool,rubric,expectations\r\n"
    "Greets,Hello,Hello,,,,,,\r\n"
    '"Two turns","My roof faces south.\n---\nIs that good?",,north,\\bsouth\\b,,,Polite,'
    '"[{""kind"": ""question""}]"\r\n'
    ",天气怎么样？,,,,,get_weather,,\r\n"
)


def _problems(data: bytes, name: str):
    drafts, problems = parse_cases(data, name)
    return drafts, [(p.line, p.field) for p in problems]


def test_csv_columns_become_expectations():
    drafts, problems = _problems(CSV_OK.encode(), "cases.csv")
    assert problems == []
    assert [(d.title, d.turns) for d in drafts] == [
        ("Greets", ["Hello"]),
        ("Two turns", ["My roof faces south.", "Is that good?"]),
        ("", ["天气怎么样？"]),
    ]
    assert [e["kind"] for e in drafts[1].expectations] == ["not_contains", "matches", "rubric", "question"]
    assert drafts[2].expectations == [{"kind": "tool_called", "name": "get_weather"}]


def test_a_bom_is_read_and_the_header_may_be_short():
    drafts, problems = _problems("\ufeffinput,expected_equals\r\nHi,Hello\r\n".encode(), "x.csv")
    assert problems == [] and drafts[0].expectations == [{"kind": "equals", "text": "Hello", "ignore_case": False}]


def test_csv_problems_name_the_line_a_record_starts_on():
    data = (
        "title,input,expected_contains,expectations\n"
        'ok,"two\nlines",x,\n'  # lines 2-3
        "no expectation,Hi,,\n"  # line 4
        'bad json,Hi,,"[{""kind"": ""contains""}"\n'  # line 5
        "empty input,,x,\n"  # line 6
        'bad kind,Hi,,"[{""kind"": ""sings""}]"\n'  # line 7
        'bad field,Hi,x,"[{""kind"": ""matches"", ""pattern"": ""(""}]"\n'  # line 8
    )
    drafts, problems = _problems(data.encode(), "x.csv")
    assert [d.title for d in drafts] == ["ok"]
    assert problems == [
        (4, "expectations"),
        (5, "expectations"),
        (6, "turns"),
        (7, "expectations[1].kind"),
        (8, "expectations[2].pattern"),
    ]


def test_an_unknown_column_is_refused_on_the_header_line():
    assert _problems(b"input,expected_contain\nHi,x\n", "x.csv")[1] == [(1, "expected_contain")]
    assert _problems(b"title\nHi\n", "x.csv")[1] == [(1, "input")]


def test_jsonl_problems_by_line():
    data = "\n".join(
        [
            '{"title": "a", "turns": ["Hi"], "expectations": [{"kind": "refusal"}]}',
            "",
            "not json",
            "[1, 2]",
            '{"input": "Hi", "expectations": [{"kind": "contains"}]}',
            '{"input": "Hi", "expected": []}',
            '{"turns": [], "expectations": [{"kind": "question"}]}',
            '{"input": "你好", "expectations": [{"kind": "rubric", "rubric": "友好", "min_score": 5}]}',
        ]
    ).encode()
    drafts, problems = _problems(data, "cases.jsonl")
    assert [d.turns for d in drafts] == [["Hi"], ["你好"]]
    assert problems == [(3, ""), (4, ""), (5, "expectations[1].text"), (6, "expected"), (7, "turns")]


def test_whole_file_problems():
    assert _problems(b"x", "cases.txt")[1] == [(0, "file")]
    assert _problems(b"", "cases.jsonl")[1] == [(0, "file")]
    assert _problems(b'{"input": "ok", "expectations": [{"kind": "refusal"}]}\n\xff\xfe', "x.jsonl")[1] == [(2, "")]
    _drafts, problems = parse_cases(b"x", "x.jsonl")
    assert "Line 1:" in str(problems[0])


@pytest.mark.django_db
@pytest.mark.parametrize(("export", "name"), [(export_jsonl, "out.jsonl"), (export_csv, "out.csv")])
def test_an_export_imports_back_into_the_same_cases(tenant, dataset, export, name):
    with tenant_scope(tenant):
        case_create(
            dataset=dataset,
            title='Quotes "and", commas\nnewline',
            turns=["第一句", "Second, with a comma", "Third\n--- not a separator line"],
            expectations=[
                {"kind": "json_schema", "schema": {"type": "object"}},
                {"kind": "tool_called", "name": "lookup", "arguments": {"q": "太阳能", "n": 2}},
                {"kind": "cited", "source": "menu.pdf"},
                {"kind": "rubric", "rubric": "礼貌", "min_score": 3},
            ],
        )
        text = export(dataset)
        copy = dataset_create(agent=dataset.agent, name="Copy")
        result = cases_import(dataset=copy, data=text.encode(), filename=name)
        assert result.problems == [] and result.created == 3

        def shape(ds):
            return [(c.title, c.turns, c.expectations) for c in ds.cases.order_by("position")]

        assert shape(copy) == shape(dataset)

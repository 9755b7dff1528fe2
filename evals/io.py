"""Cases in and out of files: JSONL and CSV (issue 39).

JSONL: one object a line, `{"title"?: "...", "turns": ["...", ...] or "input": "...", "expectations": [{...}]}`.
CSV with a header row, columns (any order, all but `input` optional):
  title, input (several user turns separated by a line "---"), expected_contains, expected_not_contains,
  expected_pattern, expected_equals, expected_tool, rubric (each one expectation of that kind), expectations (a
  JSON list of expectations, added after the columns').
Either file is UTF-8, with or without a byte-order mark. Every problem names its line (a CSV record's first line)
and field; `parse_cases` reads the whole file and reports them all. Exports write every expectation into the
`expectations` column / key, so a file exported here imports back into the same cases.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext as _

from core.bounded import unstorable_at, unstorable_message
from evals.expectations import ExpectationError, ExpectationKind, validate

if TYPE_CHECKING:
    from evals.models import Dataset

MAX_IMPORT_BYTES = 5 * 1024 * 1024
MAX_IMPORT_CASES = 2000
MAX_TURNS = 20
MAX_TURN_CHARS = 20_000
MAX_EXPECTATIONS = 20
TURN_SEPARATOR = "---"
_SEPARATOR_LINE = re.compile(r"^[ \t]*---[ \t]*$", re.MULTILINE)

# The CSV columns that are one expectation each: column -> (kind, the expectation's field).
SHORTHAND_COLUMNS: dict[str, tuple[str, str]] = {
    "expected_contains": (ExpectationKind.CONTAINS, "text"),
    "expected_not_contains": (ExpectationKind.NOT_CONTAINS, "text"),
    "expected_pattern": (ExpectationKind.MATCHES, "pattern"),
    "expected_equals": (ExpectationKind.EQUALS, "text"),
    "expected_tool": (ExpectationKind.TOOL_CALLED, "name"),
    "rubric": (ExpectationKind.RUBRIC, "rubric"),
}
CSV_COLUMNS = ("title", "input", *SHORTHAND_COLUMNS, "expectations")
JSONL_KEYS = frozenset({"title", "turns", "input", "expectations"})


@dataclass
class CaseDraft:
    """A case read from a file, valid, not stored yet."""

    title: str
    turns: list[str]
    expectations: list[dict[str, Any]]


@dataclass(frozen=True)
class ImportProblem:
    """Why line `line` (1 = the first; 0 = the whole file) could not be read; `field` names the field when one."""

    line: int
    message: str
    field: str = ""

    def __str__(self) -> str:
        return _("Line %(line)s: %(message)s") % {"line": self.line, "message": self.message}


def turns_problem(turns: Any) -> str | None:
    """Why `turns` are not a case's user turns (1 to MAX_TURNS texts, none empty or too long); None when they are."""
    if not isinstance(turns, list) or not all(isinstance(turn, str) for turn in turns):
        return _("The user turns must be a list of texts.")
    if not turns or not all(turn.strip() for turn in turns):
        return _("A case needs at least one user turn, and no empty turn.")
    if len(turns) > MAX_TURNS:
        return _("A case has at most %(max)s user turns.") % {"max": MAX_TURNS}
    if any(len(turn) > MAX_TURN_CHARS for turn in turns):
        return _("A user turn is too long (at most %(max)s characters).") % {"max": MAX_TURN_CHARS}
    where = unstorable_at(turns, "turns")
    return unstorable_message(where) if where else None


def split_turns(text: str) -> list[str]:
    """The user turns of a CSV `input`: its parts between lines that are "---"."""
    return [part.strip() for part in _SEPARATOR_LINE.split(text.replace("\r\n", "\n"))]


def _draft(line: int, title: Any, turns: Any, expectations: Any, problems: list[ImportProblem]) -> CaseDraft | None:
    """A valid draft, or None with the line's problems added to `problems`."""
    found: list[ImportProblem] = []
    if not isinstance(title, str):
        found.append(ImportProblem(line, _("The field 'title' must be text."), "title"))
    elif unstorable_at(title, "title"):
        found.append(ImportProblem(line, unstorable_message("title"), "title"))
    problem = turns_problem(turns)
    if problem:
        found.append(ImportProblem(line, problem, "turns"))
    normal = []
    if not isinstance(expectations, list) or not expectations:
        found.append(ImportProblem(line, _("A case needs at least one expectation."), "expectations"))
    elif len(expectations) > MAX_EXPECTATIONS:
        found.append(
            ImportProblem(
                line, _("A case has at most %(max)s expectations.") % {"max": MAX_EXPECTATIONS}, "expectations"
            )
        )
    else:
        for number, expectation in enumerate(expectations, start=1):
            try:
                normal.append(validate(expectation))
            except ExpectationError as exc:
                message = _("Expectation %(number)s: %(error)s") % {"number": number, "error": exc.message}
                found.append(ImportProblem(line, message, f"expectations[{number}].{exc.field}"))
    problems.extend(found)
    if found:
        return None
    return CaseDraft(title=title.strip()[:200], turns=[turn.strip() for turn in turns], expectations=normal)


def _jsonl(text: str, problems: list[ImportProblem]) -> list[CaseDraft]:
    drafts = []
    for line, row in enumerate(text.splitlines(), start=1):
        if not row.strip():
            continue
        try:
            data = json.loads(row)
        except ValueError as exc:
            problems.append(ImportProblem(line, _("This line is not JSON: %(error)s") % {"error": exc}))
            continue
        if not isinstance(data, dict):
            problems.append(ImportProblem(line, _("Each line must be a JSON object.")))
            continue
        unknown = sorted(set(data) - JSONL_KEYS)
        if unknown:
            message = _("The field '%(field)s' is not one of: %(fields)s.") % {
                "field": unknown[0],
                "fields": ", ".join(sorted(JSONL_KEYS)),
            }
            problems.append(ImportProblem(line, message, unknown[0]))
            continue
        turns = (
            data["turns"]
            if "turns" in data
            else ([data["input"]] if isinstance(data.get("input"), str) else data.get("input"))
        )
        draft = _draft(line, data.get("title") or "", turns, data.get("expectations"), problems)
        if draft is not None:
            drafts.append(draft)
    return drafts


def _csv_expectations(line: int, row: dict[str, str], problems: list[ImportProblem]) -> list[Any] | None:
    expectations: list[Any] = [
        {"kind": str(kind), field: row[column]}
        for column, (kind, field) in SHORTHAND_COLUMNS.items()
        if (row.get(column) or "").strip()
    ]
    listed = (row.get("expectations") or "").strip()
    if listed:
        try:
            more = json.loads(listed)
        except ValueError as exc:
            problems.append(
                ImportProblem(
                    line, _("The column 'expectations' is not JSON: %(error)s") % {"error": exc}, "expectations"
                )
            )
            return None
        if not isinstance(more, list):
            problems.append(ImportProblem(line, _("The column 'expectations' must be a JSON list."), "expectations"))
            return None
        expectations.extend(more)
    return expectations


def _csv(text: str, problems: list[ImportProblem]) -> list[CaseDraft]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [name.strip().lower() for name in next(reader)]
    except StopIteration:
        return []
    except csv.Error as exc:
        problems.append(ImportProblem(1, _("The CSV cannot be read: %(error)s") % {"error": exc}))
        return []
    unknown = [name for name in header if name not in CSV_COLUMNS]
    if unknown or "input" not in header:
        message = _("The header must name the column 'input' and only these columns: %(columns)s.") % {
            "columns": ", ".join(CSV_COLUMNS)
        }
        problems.append(ImportProblem(1, message, unknown[0] if unknown else "input"))
        return []
    drafts, end = [], reader.line_num
    while True:
        line = end + 1  # a record starts on the line after the previous one ended
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            problems.append(ImportProblem(line, _("The CSV cannot be read: %(error)s") % {"error": exc}))
            break
        end = reader.line_num
        if not any(value.strip() for value in values):
            continue
        if len(values) > len(header):
            problems.append(ImportProblem(line, _("This row has more values than the header has columns.")))
            continue
        row = dict(zip(header, values, strict=False))
        expectations = _csv_expectations(line, row, problems)
        if expectations is None:
            continue
        draft = _draft(line, row.get("title") or "", split_turns(row.get("input") or ""), expectations, problems)
        if draft is not None:
            drafts.append(draft)
    return drafts


def _decoded(data: bytes, problems: list[ImportProblem]) -> str | None:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        problems.append(ImportProblem(line, _("The file is not UTF-8 text: save it as UTF-8 and import it again.")))
        return None


def parse_cases(data: bytes, filename: str) -> tuple[list[CaseDraft], list[ImportProblem]]:
    """The cases of a CSV or JSONL file (by its name: .csv, else .jsonl/.ndjson/.json) and every problem found."""
    problems: list[ImportProblem] = []
    name = (filename or "").lower()
    if not name.endswith((".csv", ".jsonl", ".ndjson", ".json")):
        return [], [ImportProblem(0, _("Import a .csv or a .jsonl file."), "file")]
    if len(data) > MAX_IMPORT_BYTES:
        return [], [
            ImportProblem(
                0, _("The file is too large (at most %(max)s MB).") % {"max": MAX_IMPORT_BYTES // 2**20}, "file"
            )
        ]
    text = _decoded(data, problems)
    if text is None:
        return [], problems
    drafts = _csv(text, problems) if name.endswith(".csv") else _jsonl(text, problems)
    if not drafts and not problems:
        problems.append(ImportProblem(0, _("The file has no cases."), "file"))
    if len(drafts) > MAX_IMPORT_CASES:
        problems.append(ImportProblem(0, _("A file holds at most %(max)s cases.") % {"max": MAX_IMPORT_CASES}, "file"))
    return drafts, problems


def export_jsonl(dataset: Dataset) -> str:
    """The dataset's cases, one JSON object a line (what parse_cases reads back)."""
    lines = [
        json.dumps({"title": case.title, "turns": case.turns, "expectations": case.expectations}, ensure_ascii=False)
        for case in dataset.cases.order_by("position", "id")
    ]
    return "".join(line + "\n" for line in lines)


def export_csv(dataset: Dataset) -> str:
    """The dataset's cases as CSV: title, input (turns separated by "---" lines) and every expectation in the
    `expectations` column; starts with a byte-order mark so spreadsheet programs read it as UTF-8."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    blanks = [""] * len(SHORTHAND_COLUMNS)
    for case in dataset.cases.order_by("position", "id"):
        joined = f"\n{TURN_SEPARATOR}\n".join(case.turns)
        writer.writerow([case.title, joined, *blanks, json.dumps(case.expectations, ensure_ascii=False)])
    return "\ufeff" + out.getvalue()

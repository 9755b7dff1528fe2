"""What a case expects of the reply, and whether a reply shows it (issue 39).

An expectation is a dict: `kind` (an ExpectationKind) and that kind's fields (listed on ExpectationKind).
`validate` checks and normalizes one (what the pages, the API, the import and the services store); `check` decides
one against what the run observed of the reply (`Observed`), every kind but a rubric, which the judge model scores
(`check_all`, evals.judge).

Refusal and question are decided without a model, so they cost nothing and give the same answer every run:
- a refusal: the run saw one (`Observed.refused`, a content filter's finish), or the reply's opening (its first
  REFUSAL_OPENING characters) says it declines: "抱歉", "对不起", "无法", "不能", "恕我", "I can't", "I cannot",
  "I'm unable", "I won't", "sorry"... (REFUSAL_MARKERS);
- a question back: the reply's last sentence ends with "?" or "？", or it asks for something: "请提供", "请告诉我",
  "请问", "could you", "please provide", "let me know"... (QUESTION_MARKERS).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsonschema
from django.utils.translation import gettext as _

from core.bounded import unstorable_at, unstorable_message
from evals.models import MAX_SCORE, MIN_SCORE, ExpectationKind

if TYPE_CHECKING:
    from evals.judge import Judge

# How long a text field may be (a pattern, a rubric, an expected text), and how deep a schema or arguments.
MAX_TEXT_CHARS = 4000
DEFAULT_MIN_SCORE = 4

# A refusal says so at its start: a marker later in the reply ("you cannot miss it") is not one.
REFUSAL_OPENING = 160
REFUSAL_MARKERS = (
    "抱歉", "对不起", "无法", "不能", "不可以", "恕我", "恕難", "我不会", "我不能", "拒绝",
    "i can't", "i can’t", "i cannot", "i can not", "i'm unable", "i’m unable", "i am unable", "i'm not able",
    "i’m not able", "i am not able", "i won't", "i won’t", "i will not", "sorry", "unable to help",
    "not able to help", "i must decline",
)  # fmt: skip
QUESTION_MARKERS = (
    "请提供", "请告诉我", "请问", "能否告诉", "可以告诉我", "您是指", "你是指", "请说明", "请补充", "请确认",
    "could you", "can you tell", "can you clarify", "please provide", "please tell me", "please specify",
    "please confirm", "let me know", "which one do you",
)  # fmt: skip
FINISH_REFUSED = ("content_filter", "refusal")
_JSON_BLOCK = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_TRAILING = " \t\r\n\"'”’」』)）*_`~😀🙂😊"


class ExpectationError(ValueError):
    """An expectation that cannot be checked; `field` names its field ("kind", "text", "pattern"...)."""

    def __init__(self, message: str, *, field: str = "kind") -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class ToolCalled:
    """A tool the agent called in the turn, with its arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Observed:
    """What a run saw of the reply to a case's last turn."""

    reply: str
    tool_calls: tuple[ToolCalled, ...] = ()
    citations: tuple[str, ...] = ()  # the names of the knowledge sources the reply cited
    finish_reason: str = "stop"
    refused: bool = False  # the turn was refused or filtered before the model answered


@dataclass(frozen=True)
class Verdict:
    """One expectation's outcome, in the words shown on the run's page."""

    kind: str
    passed: bool
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "passed": self.passed, "detail": self.detail}


# The fields each kind takes: name -> required. A field outside these is refused (a misspelt one would be ignored).
FIELDS: dict[str, dict[str, bool]] = {
    ExpectationKind.CONTAINS: {"text": True, "ignore_case": False},
    ExpectationKind.NOT_CONTAINS: {"text": True, "ignore_case": False},
    ExpectationKind.EQUALS: {"text": True, "ignore_case": False},
    ExpectationKind.MATCHES: {"pattern": True, "ignore_case": False},
    ExpectationKind.JSON_SCHEMA: {"schema": True},
    ExpectationKind.TOOL_CALLED: {"name": True, "arguments": False},
    ExpectationKind.CITED: {"source": False},
    ExpectationKind.REFUSAL: {},
    ExpectationKind.QUESTION: {},
    ExpectationKind.RUBRIC: {"rubric": True, "min_score": False},
}


def _text_field(expectation: dict[str, Any], field: str, *, required: bool) -> str:
    value = expectation.get(field, "")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ExpectationError(_("The field '%(field)s' must be text.") % {"field": field}, field=field)
    if required and not value.strip():
        raise ExpectationError(_("The field '%(field)s' is required.") % {"field": field}, field=field)
    if len(value) > MAX_TEXT_CHARS:
        raise ExpectationError(
            _("The field '%(field)s' is too long (at most %(max)s characters).")
            % {"field": field, "max": MAX_TEXT_CHARS},
            field=field,
        )
    return value


def _bool_field(expectation: dict[str, Any], field: str, default: bool) -> bool:
    value = expectation.get(field, default)
    if not isinstance(value, bool):
        raise ExpectationError(_("The field '%(field)s' must be true or false.") % {"field": field}, field=field)
    return value


def _kind_of(expectation: Any) -> str:
    if not isinstance(expectation, dict):
        raise ExpectationError(_("An expectation must be an object with a 'kind'."), field="kind")
    kind = expectation.get("kind")
    if kind not in ExpectationKind.values:
        raise ExpectationError(
            _("The field 'kind' must be one of: %(kinds)s.") % {"kinds": ", ".join(ExpectationKind.values)},
            field="kind",
        )
    unknown = sorted(set(expectation) - {"kind"} - set(FIELDS[kind]))
    if unknown:
        raise ExpectationError(
            _("The field '%(field)s' is not one of a '%(kind)s' expectation's.") % {"field": unknown[0], "kind": kind},
            field=unknown[0],
        )
    return kind


def _valid_schema(expectation: dict[str, Any]) -> dict[str, Any]:
    schema = expectation.get("schema")
    if not isinstance(schema, dict):
        raise ExpectationError(_("The field 'schema' must be a JSON Schema object."), field="schema")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise ExpectationError(
            _("The field 'schema' is not a valid JSON Schema: %(error)s") % {"error": exc.message}, field="schema"
        ) from exc
    return schema


def _valid_pattern(expectation: dict[str, Any]) -> str:
    pattern = _text_field(expectation, "pattern", required=True)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ExpectationError(
            _("The field 'pattern' is not a valid regular expression: %(error)s") % {"error": exc}, field="pattern"
        ) from exc
    return pattern


def _valid_min_score(expectation: dict[str, Any]) -> int:
    value = expectation.get("min_score", DEFAULT_MIN_SCORE)
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_SCORE <= value <= MAX_SCORE:
        raise ExpectationError(
            _("The field 'min_score' must be a whole number from %(low)s to %(high)s.")
            % {"low": MIN_SCORE, "high": MAX_SCORE},
            field="min_score",
        )
    return value


def validate(expectation: Any) -> dict[str, Any]:
    """`expectation` checked and normalized (defaults filled, nothing else kept); ExpectationError naming the field
    that is wrong otherwise."""
    kind = _kind_of(expectation)
    normal: dict[str, Any] = {"kind": kind}
    if kind in (ExpectationKind.CONTAINS, ExpectationKind.NOT_CONTAINS, ExpectationKind.EQUALS):
        normal["text"] = _text_field(expectation, "text", required=True)
        normal["ignore_case"] = _bool_field(expectation, "ignore_case", kind != ExpectationKind.EQUALS)
    elif kind == ExpectationKind.MATCHES:
        normal["pattern"] = _valid_pattern(expectation)
        normal["ignore_case"] = _bool_field(expectation, "ignore_case", False)
    elif kind == ExpectationKind.JSON_SCHEMA:
        normal["schema"] = _valid_schema(expectation)
    elif kind == ExpectationKind.TOOL_CALLED:
        normal["name"] = _text_field(expectation, "name", required=True).strip()
        arguments = expectation.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise ExpectationError(_("The field 'arguments' must be an object."), field="arguments")
        if arguments:
            normal["arguments"] = arguments
    elif kind == ExpectationKind.CITED:
        source = _text_field(expectation, "source", required=False).strip()
        if source:
            normal["source"] = source
    elif kind == ExpectationKind.RUBRIC:
        normal["rubric"] = _text_field(expectation, "rubric", required=True).strip()
        normal["min_score"] = _valid_min_score(expectation)
    where = unstorable_at(normal)
    if where:
        raise ExpectationError(unstorable_message(where), field=where.split(".")[0].split("[")[0])
    return normal


def _quoted(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return f"“{text[:limit]}…”" if len(text) > limit else f"“{text}”"


def _folded(text: str, ignore_case: bool) -> str:
    return text.casefold() if ignore_case else text


def _check_text(kind: str, expectation: dict[str, Any], reply: str) -> Verdict:
    want, ignore_case = expectation["text"], expectation["ignore_case"]
    if kind == ExpectationKind.EQUALS:
        passed = _folded(reply.strip(), ignore_case) == _folded(want.strip(), ignore_case)
        detail = _("The reply equals %(text)s.") if passed else _("The reply is not exactly %(text)s.")
        return Verdict(kind, passed, detail % {"text": _quoted(want)})
    found = _folded(want, ignore_case) in _folded(reply, ignore_case)
    if kind == ExpectationKind.CONTAINS:
        detail = _("The reply contains %(text)s.") if found else _("The reply does not contain %(text)s.")
        return Verdict(kind, found, detail % {"text": _quoted(want)})
    detail = _("The reply contains %(text)s, which it must not.") if found else _("The reply avoids %(text)s.")
    return Verdict(kind, not found, detail % {"text": _quoted(want)})


def _check_pattern(expectation: dict[str, Any], reply: str) -> Verdict:
    flags = re.IGNORECASE if expectation["ignore_case"] else 0
    match = re.search(expectation["pattern"], reply, flags)
    if match:
        return Verdict(
            ExpectationKind.MATCHES, True, _("The reply matches at %(text)s.") % {"text": _quoted(match.group(0))}
        )
    detail = _("The reply does not match the pattern %(pattern)s.") % {"pattern": _quoted(expectation["pattern"])}
    return Verdict(ExpectationKind.MATCHES, False, detail)


def json_of_reply(reply: str) -> Any:
    """The JSON value of the reply: the reply itself, else its first ```json block; ValueError when neither."""
    try:
        return json.loads(reply)
    except ValueError:
        block = _JSON_BLOCK.search(reply)
        if block is None:
            raise
        return json.loads(block.group(1))


def _check_schema(expectation: dict[str, Any], reply: str) -> Verdict:
    kind = ExpectationKind.JSON_SCHEMA
    try:
        value = json_of_reply(reply)
    except ValueError:
        return Verdict(kind, False, _("The reply is not JSON (nor has a ```json block)."))
    schema = expectation["schema"]
    error = jsonschema.exceptions.best_match(jsonschema.validators.validator_for(schema)(schema).iter_errors(value))
    if error is None:
        return Verdict(kind, True, _("The reply is valid JSON for the schema."))
    where = "/".join(str(part) for part in error.absolute_path) or "(root)"
    return Verdict(
        kind,
        False,
        _("The reply's JSON does not fit the schema at %(path)s: %(error)s") % {"path": where, "error": error.message},
    )


def _contains(actual: Any, wanted: Any) -> bool:
    """`actual` holds `wanted`: an object each of its keys (recursively), anything else equal (text case-folded
    and trimmed, so "Paris" is " paris")."""
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(key in actual and _contains(actual[key], value)
                                                for key, value in wanted.items())  # fmt: skip
    if isinstance(wanted, str) and isinstance(actual, str):
        return actual.strip().casefold() == wanted.strip().casefold()
    return actual == wanted


def _check_tool(expectation: dict[str, Any], observed: Observed) -> Verdict:
    kind, name = ExpectationKind.TOOL_CALLED, expectation["name"]
    wanted = expectation.get("arguments") or {}
    calls = [call for call in observed.tool_calls if call.name == name]
    if any(_contains(call.arguments, wanted) for call in calls):
        return Verdict(kind, True, _("The agent called %(name)s.") % {"name": name})
    if calls:
        seen = json.dumps(calls[0].arguments, ensure_ascii=False)[:200]
        return Verdict(
            kind,
            False,
            _("The agent called %(name)s, but with other arguments: %(seen)s") % {"name": name, "seen": seen},
        )
    called = ", ".join(dict.fromkeys(call.name for call in observed.tool_calls)) or _("none")
    return Verdict(
        kind, False, _("The agent did not call %(name)s (tools called: %(called)s).") % {"name": name, "called": called}
    )


def _check_cited(expectation: dict[str, Any], observed: Observed) -> Verdict:
    kind, source = ExpectationKind.CITED, expectation.get("source", "")
    if not source:
        if observed.citations:
            return Verdict(kind, True, _("The reply cites %(sources)s.") % {"sources": ", ".join(observed.citations)})
        return Verdict(kind, False, _("The reply cites no knowledge source."))
    if any(source.casefold() in cited.casefold() for cited in observed.citations):
        return Verdict(kind, True, _("The reply cites %(source)s.") % {"source": source})
    cited = ", ".join(observed.citations) or _("none")
    return Verdict(
        kind, False, _("The reply does not cite %(source)s (cited: %(cited)s).") % {"source": source, "cited": cited}
    )


def is_refusal(observed: Observed) -> bool:
    """The reply declines (the module's docstring says how this is decided)."""
    if observed.refused or observed.finish_reason in FINISH_REFUSED:
        return True
    opening = observed.reply.strip()[:REFUSAL_OPENING].casefold()
    return any(marker in opening for marker in REFUSAL_MARKERS)


def is_question(reply: str) -> bool:
    """The reply asks the user something back (the module's docstring says how this is decided)."""
    text = reply.strip().rstrip(_TRAILING)
    if text.endswith(("?", "？")):
        return True
    folded = text.casefold()
    return any(marker in folded for marker in QUESTION_MARKERS)


def check(expectation: dict[str, Any], observed: Observed) -> Verdict:
    """Whether `observed` shows `expectation` (validated here); a rubric needs the judge (check_all)."""
    expectation = validate(expectation)
    kind, reply = expectation["kind"], observed.reply
    if kind in (ExpectationKind.CONTAINS, ExpectationKind.NOT_CONTAINS, ExpectationKind.EQUALS):
        return _check_text(kind, expectation, reply)
    if kind == ExpectationKind.MATCHES:
        return _check_pattern(expectation, reply)
    if kind == ExpectationKind.JSON_SCHEMA:
        return _check_schema(expectation, reply)
    if kind == ExpectationKind.TOOL_CALLED:
        return _check_tool(expectation, observed)
    if kind == ExpectationKind.CITED:
        return _check_cited(expectation, observed)
    if kind == ExpectationKind.REFUSAL:
        refused = is_refusal(observed)
        return Verdict(kind, refused, _("The reply declines.") if refused else _("The reply does not decline."))
    if kind == ExpectationKind.QUESTION:
        asked = is_question(reply)
        return Verdict(kind, asked, _("The reply asks back.") if asked else _("The reply asks nothing back."))
    raise ValueError("a rubric is scored by the judge model: use check_all")


async def _scored(
    expectation: dict[str, Any], observed: Observed, turns: list[str], judge: Judge | None
) -> tuple[Verdict, int]:
    kind = ExpectationKind.RUBRIC
    if judge is None:
        return Verdict(kind, False, _("No judge model to score the rubric.")), 0
    score = await judge.score(rubric=expectation["rubric"], turns=turns, reply=observed.reply)
    if not score.valid:
        return Verdict(kind, False, score.reason), score.tokens
    needed = expectation["min_score"]
    detail = _("Scored %(score)s of 5 (needs %(needed)s): %(reason)s") % {
        "score": score.score, "needed": needed, "reason": score.reason,
    }  # fmt: skip
    return Verdict(kind, score.score >= needed, detail), score.tokens


async def check_all(
    expectations: list[dict[str, Any]], observed: Observed, *, turns: list[str], judge: Judge | None
) -> tuple[list[Verdict], int]:
    """Every expectation's verdict in order, and the judge's tokens (rubrics are scored by `judge`; without one a
    rubric fails saying so). The judge's model errors (llm.errors.LLMError, its budget spent) propagate."""
    verdicts: list[Verdict] = []
    tokens = 0
    for expectation in expectations:
        normal = validate(expectation)
        if normal["kind"] == ExpectationKind.RUBRIC:
            verdict, used = await _scored(normal, observed, turns, judge)
            tokens += used
        else:
            verdict = check(normal, observed)
        verdicts.append(verdict)
    return verdicts, tokens

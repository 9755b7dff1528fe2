"""Parsing and validating workflow YAML (seed 1's format) with line numbers for every error.

The document is read with `yaml.SafeLoader` (no Python tags), composed to nodes first so each step and field
keeps its line. A step's `output`/`outputs` mapping may repeat `name` (seed 1's 客户营销工作流 declares two
outputs that way), so output names are read from the nodes, where repeated keys survive.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from core.bounded import TooDeep, check_yaml_depth

if TYPE_CHECKING:
    from tenants.models import Tenant

STEP_TYPES = ("input", "ask", "plugin", "llm", "custom", "output")
# What pages call each step type (the YAML keeps the keyword; progress lines and the workflow pages show these).
STEP_TYPE_LABELS = {
    "input": gettext_noop("Read input"),
    "ask": gettext_noop("Ask the user"),
    "plugin": gettext_noop("Call a tool"),
    "llm": gettext_noop("Ask the model"),
    "custom": gettext_noop("Custom function"),
    "output": gettext_noop("Output"),
}
# Steps that take their variables from the user and pause the run to ask when a required one is missing.
ASKING_TYPES = ("input", "ask")
DEFAULT_MAX_ASKS = 3

# PyYAML's words for the mistakes people make most, translated; another problem gets the plain "malformed" message
# (its line and column still point at it) rather than the parser's English inside a translated sentence.
YAML_PROBLEMS = {
    "mapping values are not allowed here": gettext_noop("a colon where a value was expected (quote the value?)"),
    "could not find expected ':'": gettext_noop("a key without its colon"),
    "did not find expected key": gettext_noop("a line that is not indented like the others"),
    "did not find expected '-' indicator": gettext_noop("a list item that is not indented like the others"),
    "found character that cannot start any token": gettext_noop("a character that cannot start a value (a tab?)"),
    "found unexpected end of stream": gettext_noop("the document ends inside a quoted value"),
    "found undefined alias": gettext_noop("an alias (*name) that was never defined"),
    "expected <block end>, but found '<block mapping start>'": gettext_noop("a line indented more than it should be"),
    "expected <block end>, but found '-'": gettext_noop("a list item where a key was expected"),
    "found duplicate anchor": gettext_noop("an anchor (&name) defined twice"),
}


def step_type_labels() -> dict[str, str]:
    """Each step type's name in the active language, by its YAML keyword, in STEP_TYPES order."""
    return {step_type: _(STEP_TYPE_LABELS[step_type]) for step_type in STEP_TYPES}


def yaml_problem_message(problem: str) -> str:
    """The YAML parser's complaint, in the reader's language."""
    known = YAML_PROBLEMS.get(problem.strip())
    if known is None:
        return _("The YAML is malformed.")
    return _("The YAML is malformed: %(problem)s.") % {"problem": _(known)}


# {name} or {name[key]} or {name[key][0]}: a variable of an earlier step, optionally indexed.
REFERENCE = re.compile(r"\{([^\W\d][\w]*)((?:\[[^\[\]{}]+\])*)\}")
KEY = re.compile(r"\[([^\[\]]+)\]")


@dataclass(frozen=True)
class WorkflowIssue:
    """One thing wrong with a workflow document."""

    message: str
    step: str | None = None
    field: str | None = None
    line: int | None = None
    column: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "field": self.field, "line": self.line, "column": self.column,
                "message": self.message}  # fmt: skip

    def __str__(self) -> str:
        where = []
        if self.line is not None and self.column is not None:
            where.append(_("line %(line)s, column %(column)s") % {"line": self.line, "column": self.column})
        elif self.line is not None:
            where.append(_("line %(line)s") % {"line": self.line})
        if self.step:
            where.append(_("step “%(step)s”") % {"step": self.step})
        if self.field:
            where.append(_("field “%(field)s”") % {"field": self.field})
        return f"{', '.join(where)}: {self.message}" if where else self.message


class WorkflowValidationError(Exception):
    """A workflow document that cannot be saved or run; `errors` lists every problem found."""

    def __init__(self, errors: list[WorkflowIssue]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(error) for error in errors))


@dataclass
class Step:
    id: str
    type: str
    line: int
    description: str = ""
    plugin: str = ""
    function: str = ""
    prompt: str = ""
    system: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    input_spec: dict[str, Any] = field(default_factory=dict)
    output_spec: Any = None
    # input and ask steps: the question put to the user when a variable is missing, how an answer fills each
    # variable (name -> Extraction), and how many times to ask before the step fails.
    question: str = ""
    extract: dict[str, Extraction] = field(default_factory=dict)
    max_asks: int = DEFAULT_MAX_ASKS


@dataclass(frozen=True)
class Extraction:
    """How an answer's text fills one variable: the first regex that matches (its `value` group, else its first
    group, else the whole match), or the first choice one of whose words occurs in the text."""

    regexes: tuple[re.Pattern[str], ...] = ()
    choices: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def find(self, text: str) -> str | None:
        for pattern in self.regexes:
            match = pattern.search(text)
            if match is None:
                continue
            if "value" in pattern.groupindex:
                value = match.group("value")
            else:
                value = match.group(1) if pattern.groups else match.group(0)
            if value and value.strip():
                return value.strip()
        folded = text.casefold()
        for choice, words in self.choices:
            if any(word.casefold() in folded for word in words):
                return choice
        return None


@dataclass
class Workflow:
    """A parsed, validated workflow document."""

    version: str
    name: str
    description: str
    steps: list[Step]
    text: str = ""

    @property
    def input_step(self) -> Step | None:
        return next((step for step in self.steps if step.type == "input"), None)


def references(value: Any) -> list[str]:
    """The variable names `value` (a string, or lists and mappings of them) refers to, in order."""
    if isinstance(value, str):
        return [match.group(1) for match in REFERENCE.finditer(value)]
    if isinstance(value, dict):
        return [name for item in value.values() for name in references(item)]
    if isinstance(value, list):
        return [name for item in value for name in references(item)]
    return []


def _line(node: yaml.Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None else None


def _pairs(node: yaml.Node) -> list[tuple[yaml.Node, yaml.Node]]:
    return list(node.value) if isinstance(node, yaml.MappingNode) else []


def _child(node: yaml.Node, key: str) -> tuple[yaml.Node | None, yaml.Node | None]:
    """The key node and value node of `key` in a mapping node (the last one when repeated, as YAML loads it)."""
    found: tuple[yaml.Node | None, yaml.Node | None] = (None, None)
    for key_node, value_node in _pairs(node):
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            found = (key_node, value_node)
    return found


def _output_names(node: yaml.Node | None) -> list[str]:
    """Output names of a step's `output`/`outputs`: a mapping with one or more `name` keys, a list of such
    mappings, a list of names, or a single name."""
    if node is None:
        return []
    if isinstance(node, yaml.ScalarNode):
        return [node.value] if node.value else []
    if isinstance(node, yaml.SequenceNode):
        return [name for item in node.value for name in _output_names(item)]
    return [
        value.value
        for key, value in _pairs(node)
        if isinstance(key, yaml.ScalarNode) and key.value == "name" and isinstance(value, yaml.ScalarNode)
    ]


def _compose(text: str) -> tuple[yaml.Node | None, Any]:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return node, data


def parse_workflow(text: str, *, check_names: bool = True, tenant: Tenant | None = None) -> Workflow:
    """Parse and validate a workflow document; raise WorkflowValidationError listing every problem.

    With `check_names`, plugins must be registered tools and custom functions registered Python functions; with a
    `tenant` too, tools it may use (a pack's only where the pack is enabled).
    """
    from agents.tools import get_tool, tool_refusal
    from agents.tools.registry import PythonFunctionTool

    try:
        check_yaml_depth(text)
        root, data = _compose(text)
    except TooDeep as exc:
        raise WorkflowValidationError([WorkflowIssue(str(exc), line=exc.line)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or ""
        raise WorkflowValidationError(
            [
                WorkflowIssue(
                    yaml_problem_message(problem),
                    line=mark.line + 1 if mark else None,
                    column=mark.column + 1 if mark else None,
                )
            ]
        ) from None
    except yaml.YAMLError:
        raise WorkflowValidationError([WorkflowIssue(_("The YAML is malformed."))]) from None

    if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
        raise WorkflowValidationError(
            [WorkflowIssue(_("A workflow is a mapping with version, name, description and steps."), line=1)]
        )
    errors: list[WorkflowIssue] = []
    for key in ("version", "name", "steps"):
        if data.get(key) in (None, "", []):
            errors.append(WorkflowIssue(_("This field is required."), field=key, line=_line(_child(root, key)[0]) or 1))
    steps_key, steps_node = _child(root, "steps")
    if steps_node is not None and not isinstance(steps_node, yaml.SequenceNode):
        errors.append(WorkflowIssue(_("Steps must be a list of steps."), field="steps", line=_line(steps_node)))
        steps_node = None

    steps: list[Step] = []
    produced: set[str] = set()
    seen_ids: set[str] = set()
    for position, step_node in enumerate(steps_node.value if steps_node is not None else [], start=1):
        step_data = data["steps"][position - 1]
        step_line = _line(step_node) or 1
        if not isinstance(step_data, dict):
            errors.append(WorkflowIssue(_("A step must be a mapping."), step=f"#{position}", line=step_line))
            continue
        step_id = str(step_data.get("id") or "")
        label = step_id or f"#{position}"

        def issue(
            message: str,
            field_name: str | None,
            node: yaml.Node | None = None,
            *,
            label: str = label,
            step_node: yaml.Node = step_node,
            step_line: int = step_line,
        ) -> None:
            line = _line(node) or _line(_child(step_node, field_name)[0] if field_name else None) or step_line
            errors.append(WorkflowIssue(message, step=label, field=field_name, line=line))

        if not step_id:
            issue(_("This field is required."), "id")
        elif step_id in seen_ids:
            issue(_("Another step already has the id “%(id)s”: step ids must be unique.") % {"id": step_id}, "id")
        seen_ids.add(step_id)

        step_type = step_data.get("type")
        if not step_type:
            issue(_("This field is required."), "type")
            continue
        if step_type not in STEP_TYPES:
            issue(
                _("Unknown step type “%(type)s”: use one of %(types)s.")
                % {"type": step_type, "types": ", ".join(STEP_TYPES)},
                "type",
            )
            continue

        inputs_field = "inputs" if "inputs" in step_data else "input"
        outputs_field = "outputs" if "outputs" in step_data else "output"
        _inputs_key, inputs_node = _child(step_node, inputs_field)
        outputs_key, outputs_node = _child(step_node, outputs_field)
        raw_inputs = step_data.get(inputs_field)
        step = Step(id=step_id, type=step_type, line=step_line, description=str(step_data.get("description") or ""))

        if step_type == "input":
            step.input_spec = raw_inputs if isinstance(raw_inputs, dict) else {}
        elif step_type == "ask":
            pass  # an ask step takes nothing but the user's answer (and the variables already known)
        else:
            if raw_inputs is not None and not isinstance(raw_inputs, dict):
                issue(_("Inputs must be a mapping of names to values."), inputs_field)
            else:
                step.inputs = raw_inputs or {}
            # Each input value may only name variables that earlier steps produce.
            for key_node, value_node in _pairs(inputs_node) if inputs_node is not None else []:
                for name in references(step.inputs.get(key_node.value)):
                    if name not in produced:
                        issue(
                            _("“{%(name)s}” is not produced by any earlier step.") % {"name": name},
                            f"{inputs_field}.{key_node.value}",
                            value_node,
                        )

        if step_type == "output":
            step.output_spec = step_data.get(outputs_field)
        else:
            step.outputs = _output_names(outputs_node)
            if not step.outputs:
                issue(_("Name the variable this step produces (outputs: name: …)."), outputs_field, outputs_key)

        if step_type in ASKING_TYPES:
            _asking_fields(step, step_data, step_node, produced, issue)
        if step_type == "plugin":
            step.plugin = str(step_data.get("plugin") or "")
            if not step.plugin:
                issue(_("This field is required."), "plugin")
            elif check_names and get_tool(step.plugin) is None:
                issue(_("Unknown plugin “%(name)s”: no tool of that name is registered.") % {"name": step.plugin},
                      "plugin")  # fmt: skip
            elif check_names and tenant is not None and (refusal := tool_refusal(step.plugin, tenant=tenant)):
                issue(refusal, "plugin")
        elif step_type == "custom":
            step.function = str(step_data.get("function") or "")
            if not step.function:
                issue(_("This field is required."), "function")
            elif check_names and not isinstance(get_tool(step.function), PythonFunctionTool):
                issue(
                    _("Unknown function “%(name)s”: custom steps call registered Python functions only.")
                    % {"name": step.function},
                    "function",
                )
            elif check_names and tenant is not None and (refusal := tool_refusal(step.function, tenant=tenant)):
                issue(refusal, "function")
        elif step_type == "llm":
            step.prompt = str(step_data.get("prompt") or "")
            step.system = str(step_data.get("system") or "")
            if not step.prompt:
                issue(_("This field is required."), "prompt")
            for field_name in ("prompt", "system"):
                _key, value_node = _child(step_node, field_name)
                for name in references(getattr(step, field_name)):
                    if name not in produced:
                        issue(
                            _("“{%(name)s}” is not produced by any earlier step.") % {"name": name},
                            field_name,
                            value_node,
                        )
        produced.update(step.outputs)
        steps.append(step)

    if steps_node is not None and steps and not any(step.type == "output" for step in steps):
        errors.append(WorkflowIssue(_("Add an output step: it gives the workflow's result."), field="steps",
                                    line=_line(steps_key)))  # fmt: skip
    if errors:
        raise WorkflowValidationError(errors)
    return Workflow(
        version=str(data.get("version")),
        name=str(data.get("name")),
        description=str(data.get("description") or ""),
        steps=steps,
        text=text,
    )


def _asking_fields(
    step: Step, step_data: dict[str, Any], step_node: yaml.Node, produced: set[str], issue: Callable[..., None]
) -> None:
    """`question`, `extract` and `max_asks` of an input or ask step, each problem named with its field and line."""
    _key, question_node = _child(step_node, "question")
    question = step_data.get("question")
    if question is not None and not isinstance(question, str):
        issue(_("The question must be text."), "question", question_node)
    step.question = question if isinstance(question, str) else ""
    if step.type == "ask" and not step.question.strip():
        issue(_("This field is required: the question put to the user when a variable is missing."), "question")
    for name in references(step.question):
        if name not in produced:
            issue(_("“{%(name)s}” is not produced by any earlier step.") % {"name": name}, "question", question_node)

    max_asks = step_data.get("max_asks", DEFAULT_MAX_ASKS)
    if isinstance(max_asks, bool) or not isinstance(max_asks, int) or max_asks < 1:
        issue(_("max_asks must be a whole number of 1 or more."), "max_asks")
    else:
        step.max_asks = max_asks

    _key, extract_node = _child(step_node, "extract")
    extract = step_data.get("extract")
    if extract is None:
        return
    if not isinstance(extract, dict) or not isinstance(extract_node, yaml.MappingNode):
        issue(_("extract maps each variable of this step to a rule (regex or choices)."), "extract", extract_node)
        return
    for key_node, rule_node in _pairs(extract_node):
        name = str(key_node.value)
        where = f"extract.{name}"
        if name not in step.outputs:
            issue(
                _("“%(name)s” is not a variable of this step: extract rules fill the step's outputs (%(outputs)s).")
                % {"name": name, "outputs": ", ".join(step.outputs) or "—"},
                where,
                key_node,
            )
            continue
        rule = extract.get(name)
        extraction = _extraction(rule, rule_node, where, issue)
        if extraction is not None:
            step.extract[name] = extraction


def _extraction(rule: Any, node: yaml.Node, where: str, issue: Callable[..., None]) -> Extraction | None:
    if not isinstance(rule, dict) or not ({"regex", "choices"} & set(rule)):
        issue(_("A rule is a mapping with “regex” (one or a list) or “choices”."), where, node)
        return None
    regexes: list[re.Pattern[str]] = []
    raw = rule.get("regex")
    texts = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else [] if raw is None else [None]
    for text in texts:
        if not isinstance(text, str):
            issue(_("regex must be a regular expression or a list of them."), f"{where}.regex", node)
            return None
        try:
            regexes.append(re.compile(text))
        except re.error as exc:
            issue(_("Invalid regular expression “%(regex)s”: %(error)s.") % {"regex": text, "error": exc},
                  f"{where}.regex", _child(node, "regex")[1] or node)  # fmt: skip
            return None
    choices: list[tuple[str, tuple[str, ...]]] = []
    raw = rule.get("choices")
    if isinstance(raw, list) and raw and all(isinstance(item, str) and item for item in raw):
        choices = [(item, (item,)) for item in raw]
    elif (
        isinstance(raw, dict)
        and raw
        and all(
            isinstance(words, list) and words and all(isinstance(word, str) and word for word in words)
            for words in raw.values()
        )
    ):
        choices = [(str(choice), (str(choice), *words)) for choice, words in raw.items()]
    elif raw is not None:
        issue(
            _("choices is a list of values, or a mapping of each value to the words that mean it."),
            f"{where}.choices",
            _child(node, "choices")[1] or node,
        )
        return None
    return Extraction(regexes=tuple(regexes), choices=tuple(choices))

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

from agents.tools import find_tool, get_tool, tool_refusal
from agents.tools.registry import PythonFunctionTool, tenant_tool_name
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


def _load(text: str) -> tuple[yaml.MappingNode, dict[str, Any]]:
    """The document's root node and data; a document that is not YAML, too deep, or not a mapping raises."""
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
    return root, data


@dataclass
class _Parse:
    """What parsing a document carries from step to step: the problems found, the variables earlier steps
    produce, the step ids seen, and how strictly names are checked."""

    check_names: bool
    tenant: Tenant | None
    errors: list[WorkflowIssue] = field(default_factory=list)
    produced: set[str] = field(default_factory=set)
    seen_ids: set[str] = field(default_factory=set)


@dataclass
class _StepReader:
    """One step being read: its data, its node (for lines) and the step built from it; `issue` records a problem
    named with the step, the field and the line."""

    parse: _Parse
    step: Step
    data: dict[str, Any]
    node: yaml.Node
    label: str

    @property
    def inputs_field(self) -> str:
        return "inputs" if "inputs" in self.data else "input"

    @property
    def outputs_field(self) -> str:
        return "outputs" if "outputs" in self.data else "output"

    def issue(self, message: str, field_name: str | None, node: yaml.Node | None = None) -> None:
        line = _line(node) or _line(_child(self.node, field_name)[0] if field_name else None) or self.step.line
        self.parse.errors.append(WorkflowIssue(message, step=self.label, field=field_name, line=line))

    def check_references(self, value: Any, field_name: str, node: yaml.Node | None) -> None:
        """Each variable `value` names must be produced by an earlier step."""
        for name in references(value):
            if name not in self.parse.produced:
                self.issue(_("“{%(name)s}” is not produced by any earlier step.") % {"name": name}, field_name, node)

    def mapping_inputs(self) -> None:
        """The step's inputs: a mapping whose values may only name variables that earlier steps produce."""
        raw_inputs = self.data.get(self.inputs_field)
        if raw_inputs is not None and not isinstance(raw_inputs, dict):
            self.issue(_("Inputs must be a mapping of names to values."), self.inputs_field)
        else:
            self.step.inputs = raw_inputs or {}
        _key, inputs_node = _child(self.node, self.inputs_field)
        for key_node, value_node in _pairs(inputs_node) if inputs_node is not None else []:
            self.check_references(
                self.step.inputs.get(key_node.value), f"{self.inputs_field}.{key_node.value}", value_node
            )

    def output_names(self) -> None:
        """The variables the step produces (every step but the output step names at least one)."""
        outputs_key, outputs_node = _child(self.node, self.outputs_field)
        self.step.outputs = _output_names(outputs_node)
        if not self.step.outputs:
            self.issue(_("Name the variable this step produces (outputs: name: …)."), self.outputs_field, outputs_key)

    def _known(self, name: str) -> bool:
        """A registered tool, or one of the tenant's own (without a tenant: a name of that form, checked at run)."""
        if self.parse.tenant is None:
            return get_tool(name) is not None or tenant_tool_name(name)
        return find_tool(name, tenant=self.parse.tenant) is not None

    def tool_name(self, field_name: str, *, functions_only: bool) -> str:
        """A plugin's or custom function's name: required, registered (a Python function for a custom step) and,
        with a tenant, one it may use."""
        name = str(self.data.get(field_name) or "")
        check = self.parse.check_names
        if not name:
            self.issue(_("This field is required."), field_name)
        elif check and not functions_only and not self._known(name):
            self.issue(_("Unknown plugin “%(name)s”: no tool of that name is registered.") % {"name": name},
                       field_name)  # fmt: skip
        elif check and functions_only and not isinstance(get_tool(name), PythonFunctionTool):
            self.issue(
                _("Unknown function “%(name)s”: custom steps call registered Python functions only.") % {"name": name},
                field_name,
            )
        elif check and self.parse.tenant is not None and (refusal := tool_refusal(name, tenant=self.parse.tenant)):
            self.issue(refusal, field_name)
        return name


def _parse_input(reader: _StepReader) -> None:
    raw_inputs = reader.data.get(reader.inputs_field)
    reader.step.input_spec = raw_inputs if isinstance(raw_inputs, dict) else {}
    reader.output_names()
    _asking_fields(reader)


def _parse_ask(reader: _StepReader) -> None:
    # An ask step takes nothing but the user's answer (and the variables already known).
    reader.output_names()
    _asking_fields(reader)


def _parse_plugin(reader: _StepReader) -> None:
    reader.mapping_inputs()
    reader.output_names()
    reader.step.plugin = reader.tool_name("plugin", functions_only=False)


def _parse_custom(reader: _StepReader) -> None:
    reader.mapping_inputs()
    reader.output_names()
    reader.step.function = reader.tool_name("function", functions_only=True)


def _parse_llm(reader: _StepReader) -> None:
    reader.mapping_inputs()
    reader.output_names()
    step = reader.step
    step.prompt = str(reader.data.get("prompt") or "")
    step.system = str(reader.data.get("system") or "")
    if not step.prompt:
        reader.issue(_("This field is required."), "prompt")
    for field_name in ("prompt", "system"):
        reader.check_references(getattr(step, field_name), field_name, _child(reader.node, field_name)[1])


def _parse_output(reader: _StepReader) -> None:
    reader.mapping_inputs()
    reader.step.output_spec = reader.data.get(reader.outputs_field)


# Each step type's fields, read in the order their problems are listed: inputs, outputs, the type's own fields.
STEP_PARSERS: dict[str, Callable[[_StepReader], None]] = {
    "input": _parse_input,
    "ask": _parse_ask,
    "plugin": _parse_plugin,
    "llm": _parse_llm,
    "custom": _parse_custom,
    "output": _parse_output,
}


def _parse_step(parse: _Parse, position: int, step_node: yaml.Node, step_data: Any) -> Step | None:
    """One step of the list, or None when it is not a step at all (its problems are in `parse.errors`)."""
    step_line = _line(step_node) or 1
    if not isinstance(step_data, dict):
        parse.errors.append(WorkflowIssue(_("A step must be a mapping."), step=f"#{position}", line=step_line))
        return None
    step_id = str(step_data.get("id") or "")
    step = Step(id=step_id, type="", line=step_line, description=str(step_data.get("description") or ""))
    reader = _StepReader(parse=parse, step=step, data=step_data, node=step_node, label=step_id or f"#{position}")
    if not step_id:
        reader.issue(_("This field is required."), "id")
    elif step_id in parse.seen_ids:
        reader.issue(_("Another step already has the id “%(id)s”: step ids must be unique.") % {"id": step_id}, "id")
    parse.seen_ids.add(step_id)

    step_type = step_data.get("type")
    if not step_type:
        reader.issue(_("This field is required."), "type")
        return None
    if step_type not in STEP_TYPES:  # a tuple: the value may be a list or a mapping
        reader.issue(
            _("Unknown step type “%(type)s”: use one of %(types)s.")
            % {"type": step_type, "types": ", ".join(STEP_TYPES)},
            "type",
        )
        return None
    step.type = step_type
    STEP_PARSERS[step_type](reader)
    parse.produced.update(step.outputs)
    return step


def parse_workflow(text: str, *, check_names: bool = True, tenant: Tenant | None = None) -> Workflow:
    """Parse and validate a workflow document; raise WorkflowValidationError listing every problem.

    With `check_names`, plugins must be registered tools and custom functions registered Python functions; with a
    `tenant` too, tools it may use (a pack's only where the pack is enabled).
    """
    root, data = _load(text)
    parse = _Parse(check_names=check_names, tenant=tenant)
    for key in ("version", "name", "steps"):
        if data.get(key) in (None, "", []):
            parse.errors.append(
                WorkflowIssue(_("This field is required."), field=key, line=_line(_child(root, key)[0]) or 1)
            )
    steps_key, steps_node = _child(root, "steps")
    if steps_node is not None and not isinstance(steps_node, yaml.SequenceNode):
        parse.errors.append(WorkflowIssue(_("Steps must be a list of steps."), field="steps", line=_line(steps_node)))
        steps_node = None

    steps: list[Step] = []
    for position, step_node in enumerate(steps_node.value if steps_node is not None else [], start=1):
        step = _parse_step(parse, position, step_node, data["steps"][position - 1])
        if step is not None:
            steps.append(step)

    if steps_node is not None and steps and not any(step.type == "output" for step in steps):
        parse.errors.append(WorkflowIssue(_("Add an output step: it gives the workflow's result."), field="steps",
                                          line=_line(steps_key)))  # fmt: skip
    if parse.errors:
        raise WorkflowValidationError(parse.errors)
    return Workflow(
        version=str(data.get("version")),
        name=str(data.get("name")),
        description=str(data.get("description") or ""),
        steps=steps,
        text=text,
    )


def _asking_fields(reader: _StepReader) -> None:
    """`question`, `extract` and `max_asks` of an input or ask step, each problem named with its field and line."""
    step, step_data, issue = reader.step, reader.data, reader.issue
    _key, question_node = _child(reader.node, "question")
    question = step_data.get("question")
    if question is not None and not isinstance(question, str):
        issue(_("The question must be text."), "question", question_node)
    step.question = question if isinstance(question, str) else ""
    if step.type == "ask" and not step.question.strip():
        issue(_("This field is required: the question put to the user when a variable is missing."), "question")
    reader.check_references(step.question, "question", question_node)

    max_asks = step_data.get("max_asks", DEFAULT_MAX_ASKS)
    if isinstance(max_asks, bool) or not isinstance(max_asks, int) or max_asks < 1:
        issue(_("max_asks must be a whole number of 1 or more."), "max_asks")
    else:
        step.max_asks = max_asks

    _key, extract_node = _child(reader.node, "extract")
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

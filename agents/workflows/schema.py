"""Parsing and validating workflow YAML (seed 1's format) with line numbers for every error.

The document is read with `yaml.SafeLoader` (no Python tags), composed to nodes first so each step and field
keeps its line. A step's `output`/`outputs` mapping may repeat `name` (seed 1's 客户营销工作流 declares two
outputs that way), so output names are read from the nodes, where repeated keys survive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.utils.translation import gettext as _

STEP_TYPES = ("input", "plugin", "llm", "custom", "output")

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


def parse_workflow(text: str, *, check_names: bool = True) -> Workflow:
    """Parse and validate a workflow document; raise WorkflowValidationError listing every problem.

    With `check_names`, plugins must be registered tools and custom functions registered Python functions.
    """
    from agents.tools import get_tool
    from agents.tools.registry import PythonFunctionTool

    try:
        root, data = _compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or ""
        raise WorkflowValidationError(
            [
                WorkflowIssue(
                    _("The YAML is malformed: %(problem)s.") % {"problem": problem},
                    line=mark.line + 1 if mark else None,
                    column=mark.column + 1 if mark else None,
                )
            ]
        ) from None
    except yaml.YAMLError as exc:
        raise WorkflowValidationError(
            [WorkflowIssue(_("The YAML is malformed: %(problem)s.") % {"problem": exc})]
        ) from None

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

        if step_type == "plugin":
            step.plugin = str(step_data.get("plugin") or "")
            if not step.plugin:
                issue(_("This field is required."), "plugin")
            elif check_names and get_tool(step.plugin) is None:
                issue(_("Unknown plugin “%(name)s”: no tool of that name is registered.") % {"name": step.plugin},
                      "plugin")  # fmt: skip
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

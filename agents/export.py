"""Agent export and import as a YAML file (A7 item 5): the configuration, the tools, the overflow strategy and
the agent's workflow (its YAML embedded). The model provider is not exported: it belongs to the tenant.

Import creates the agent in the active tenant: unknown tools and an invalid workflow are refused with the reason;
a name already taken gets a numbered suffix ("Menu helper (2)").
"""

from __future__ import annotations

from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from agents.models import Agent, Workflow
from agents.services import agent_create
from agents.settings_table import SETTINGS
from agents.tools import find_tool
from agents.workflows.schema import WorkflowValidationError, parse_workflow
from agents.workflows.services import workflow_save
from core.bounded import TooDeep, check_yaml_depth

FORMAT = "agent-platform/agent"
FORMAT_VERSION = 1
# The settings an export carries (agents.settings_table): not the provider nor the knowledge bases (the tenant's).
FIELDS = SETTINGS.export_fields


class AgentImportError(Exception):
    """The file cannot be imported; `errors` says why, each line a reason the user can act on."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("; ".join(errors))


class _Literal(str):
    """A string written as a YAML block (|), so an embedded workflow stays readable."""


def _literal(dumper: yaml.SafeDumper, value: _Literal) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Literal, _literal)


def agent_export(*, agent: Agent) -> str:
    """The agent as a YAML document."""
    data: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION}
    data["agent"] = SETTINGS.export(agent)
    workflow = Workflow.objects.filter(agent=agent).first()
    if workflow is not None:
        text = workflow.yaml if workflow.yaml.endswith("\n") else workflow.yaml + "\n"
        # A block scalar cannot keep trailing spaces; the YAML means the same without them.
        text = "\n".join(line.rstrip() for line in text.split("\n"))
        data["workflow"] = _Literal(text)
    return yaml.dump(data, Dumper=_Dumper, allow_unicode=True, sort_keys=False)


def export_filename(name: str) -> str:
    safe = "".join(char if char.isalnum() or char in "-_" else "-" for char in name).strip("-") or "agent"
    return f"{safe}.agent.yaml"


def _free_name(wanted: str, model: type[Agent] | type[Workflow]) -> str:
    name, number = wanted, 2
    while model.objects.filter(name=name).exists():
        name = f"{wanted} ({number})"
        number += 1
    return name


def _renamed(text: str, name: str) -> str:
    """`text` with its top-level name replaced on its own line (comments and the rest kept as written)."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    for key, _node in root.value:
        if key.value == "name":
            lines = text.split("\n")
            lines[key.start_mark.line] = "name: " + yaml.safe_dump(name, allow_unicode=True).split("\n")[0]
            return "\n".join(lines)
    return text


def _read_export(text: str) -> dict[str, Any]:
    """The parsed export file; AgentImportError when it is not YAML or not an agent export."""
    try:
        check_yaml_depth(text)
        data = yaml.safe_load(text)
    except TooDeep as exc:
        raise AgentImportError([str(exc)]) from None
    except yaml.YAMLError as exc:
        raise AgentImportError([_("The file is not valid YAML: %(problem)s") % {"problem": exc}]) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("agent"), dict):
        raise AgentImportError([_("This is not an agent export: export an agent from its page and upload that file.")])
    return data


def _import_problems(config: dict[str, Any], tools: Any, workflow_text: Any, *, tenant: Any) -> list[str]:
    """What is wrong with an export's agent fields, tools and workflow, each in a sentence (none: it imports).
    A tool is known if it is the platform's or `tenant`'s own (an enabled MCP tool of one of its servers)."""
    errors: list[str] = []
    if not str(config.get("name") or "").strip():
        errors.append(_("The agent has no name."))
    if not isinstance(tools, list):
        errors.append(_("Give the tools as a list of tool names."))
        tools = []
    unknown = [str(name) for name in tools if find_tool(str(name), tenant=tenant) is None]
    if unknown:
        errors.append(_("Unknown tools: %(names)s.") % {"names": ", ".join(unknown)})
    if workflow_text:
        try:
            parse_workflow(str(workflow_text))
        except WorkflowValidationError as exc:
            errors.extend(_("Workflow: %(error)s") % {"error": error} for error in exc.errors)
    return errors


def _import_workflow(*, tenant: Any, agent: Agent, workflow_text: str) -> None:
    """Save an export's workflow for the imported agent, under a free name."""
    document = parse_workflow(workflow_text)
    free = _free_name(document.name[:110], Workflow)
    text_to_save = _renamed(workflow_text, free) if free != document.name else workflow_text
    try:
        workflow_save(tenant=tenant, yaml_text=text_to_save, agent=agent)
    except WorkflowValidationError as exc:
        raise AgentImportError([str(error) for error in exc.errors]) from None


@transaction.atomic
def agent_import(*, tenant: Any, text: str) -> Agent:
    """Create the agent (and its workflow) of an exported file in `tenant`; AgentImportError says what is wrong."""
    data = _read_export(text)
    config = {name: data["agent"][name] for name in FIELDS if name in data["agent"]}
    tools = config.get("tools") or []
    workflow_text = data.get("workflow")
    errors = _import_problems(config, tools, workflow_text, tenant=tenant)
    if errors:
        raise AgentImportError(errors)
    name = _free_name(str(config.pop("name")).strip()[:110], Agent)
    config.pop("tools", None)
    try:
        agent = agent_create(tenant=tenant, name=name, **config)
        if tools:
            agent.tools = [str(tool) for tool in tools]
            agent.full_clean()
            agent.save(update_fields=["tools", "updated_at"])
    except ValidationError as exc:
        raise AgentImportError([str(message) for message in exc.messages]) from None
    if workflow_text:
        _import_workflow(tenant=tenant, agent=agent, workflow_text=str(workflow_text))
    return agent

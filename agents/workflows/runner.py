"""Running a parsed workflow step by step, with a log entry per step (inputs, outputs, time in ms, error).

input steps take the given inputs or the user's message; plugin and custom steps call registered tools through
`Tool.run` with validated arguments and a ToolCallContext (custom steps only registered Python functions, never
user code); llm steps send the interpolated prompt to the tenant's model; the output step gives the result.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext as _

from agents.tools import ToolCallContext, ToolError, get_tool
from agents.tools.registry import PythonFunctionTool
from agents.workflows.interpolation import InterpolationError, as_text, interpolate
from agents.workflows.schema import Step, Workflow

if TYPE_CHECKING:
    from llm.models import ModelProvider
    from tenants.models import Tenant

StepHook = Callable[[Step, str, dict[str, Any]], Awaitable[None]]


class StepFailed(Exception):
    """A step could not run; the message says why and what to do."""


@dataclass
class WorkflowRunResult:
    status: str  # "completed" or "failed"
    result: Any = None
    text: str = ""
    variables: dict[str, Any] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    context: dict[str, Any] = field(default_factory=dict)


def result_text(value: Any) -> str:
    """The output step's result as the reply text: text as is, a list one item a line, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str | int | float) for item in value):
        return "\n".join(f"- {item}" for item in value)
    if isinstance(value, dict) and len(value) == 1:
        return result_text(next(iter(value.values())))
    return json.dumps(value, ensure_ascii=False, default=str)


def _input_values(step: Step, message: str, given: dict[str, Any]) -> dict[str, Any]:
    names = step.outputs
    example = step.input_spec.get("example") if isinstance(step.input_spec, dict) else None
    aliases = list(example) if isinstance(example, dict) else []
    values: dict[str, Any] = {}
    supplied = dict(given)
    if not supplied and len(names) > 1 and message.strip().startswith("{"):
        try:
            parsed = json.loads(message)
            supplied = parsed if isinstance(parsed, dict) else {}
        except json.JSONDecodeError:
            pass
    if not supplied and len(names) > 1:
        # "tag: 潜在客户" lines, one value a line.
        for line in message.splitlines():
            match = re.match(r"\s*([^:：=]+?)\s*[:：=]\s*(.+)$", line)
            if match:
                supplied[match.group(1)] = match.group(2).strip()
    for position, name in enumerate(names):
        alias = aliases[position] if position < len(aliases) else None
        if name in supplied:
            values[name] = supplied[name]
        elif alias is not None and alias in supplied:
            values[name] = supplied[alias]
        elif len(names) == 1:
            values[name] = message
    missing = [name for name in names if name not in values]
    if missing:
        raise StepFailed(
            _("Missing input: %(names)s. Give each on its own line as “name: value”.") % {"names": ", ".join(missing)}
        )
    return values


def _assign(step: Step, value: Any) -> dict[str, Any]:
    if len(step.outputs) == 1:
        return {step.outputs[0]: value}
    if isinstance(value, dict):
        return {name: value.get(name) for name in step.outputs}
    return {step.outputs[0]: value, **{name: None for name in step.outputs[1:]}}


async def run_workflow(
    workflow: Workflow,
    *,
    tenant: Tenant,
    message: str = "",
    inputs: dict[str, Any] | None = None,
    provider: ModelProvider | None = None,
    model: str | None = None,
    temperature: float | None = None,
    agent_id: int | None = None,
    conversation_id: int | None = None,
    user_id: int | None = None,
    on_step: StepHook | None = None,
) -> WorkflowRunResult:
    """Run `workflow` to its output step. Never raises for a failing step: the run ends "failed" with the error
    in the result and in that step's log entry."""
    variables: dict[str, Any] = {}
    context: dict[str, Any] = {}
    run = WorkflowRunResult(status="completed", variables=variables, context=context)
    for step in workflow.steps:
        started = time.perf_counter()
        entry: dict[str, Any] = {"step": step.id, "type": step.type, "inputs": {}, "outputs": {}, "error": ""}
        if on_step is not None:
            await on_step(step, "started", entry)
        try:
            if step.type == "input":
                entry["inputs"] = {"message": message, **(inputs or {})}
                produced = _input_values(step, message, inputs or {})
            elif step.type in ("plugin", "custom"):
                arguments = interpolate(step.inputs, variables)
                entry["inputs"] = arguments
                produced = _assign(step, await _call_tool(step, arguments, tenant, agent_id, conversation_id,
                                                          user_id, context))  # fmt: skip
            elif step.type == "llm":
                prompt = as_text(interpolate(step.prompt, variables))
                system = as_text(interpolate(step.system, variables)) if step.system else ""
                entry["inputs"] = {"prompt": prompt, **({"system": system} if system else {})}
                text = await _call_model(tenant, provider, model, temperature, prompt, system, agent_id,
                                         conversation_id)  # fmt: skip
                produced = _assign(step, text)
            else:  # output
                values = interpolate(step.inputs, variables)
                entry["inputs"] = values
                run.result = next(iter(values.values())) if len(values) == 1 else values
                run.text = result_text(run.result)
                produced = {}
                entry["outputs"] = {"result": run.result}
            variables.update(produced)
            if step.type != "output":
                entry["outputs"] = produced
        except (StepFailed, InterpolationError, ToolError) as exc:
            entry["error"] = str(exc)
        except Exception as exc:  # a tool or the model failed: the run records it and stops
            from llm.errors import LLMError

            if isinstance(exc, LLMError):
                entry["error"] = str(exc.message)
            else:
                entry["error"] = _("The step failed: %(error)s") % {"error": exc}
        entry["ms"] = round((time.perf_counter() - started) * 1000, 1)
        run.log.append(entry)
        if on_step is not None:
            await on_step(step, "failed" if entry["error"] else "completed", entry)
        if entry["error"]:
            run.status = "failed"
            run.error = _("Step “%(step)s” failed: %(error)s") % {"step": step.id, "error": entry["error"]}
            break
    return run


async def _call_tool(
    step: Step,
    arguments: dict[str, Any],
    tenant: Tenant,
    agent_id: int | None,
    conversation_id: int | None,
    user_id: int | None,
    context: dict[str, Any],
) -> Any:
    name = step.plugin or step.function
    tool = get_tool(name)
    if tool is None or (step.type == "custom" and not isinstance(tool, PythonFunctionTool)):
        raise StepFailed(_("“%(name)s” is not a registered tool or function.") % {"name": name})
    problems = tool.validation_errors(arguments)
    if problems:
        raise StepFailed(
            _("Invalid arguments for %(name)s: %(problems)s") % {"name": name, "problems": "; ".join(problems)}
        )
    call = ToolCallContext(tenant=tenant, user_id=user_id, agent_id=agent_id, conversation_id=conversation_id,
                           context=dict(context))  # fmt: skip
    result = await tool.run(arguments, call)
    if result.ask_user:
        raise StepFailed(result.ask_user)
    for key, value in result.context.items():
        if isinstance(value, list) and isinstance(context.get(key), list):
            context[key] = [*context[key], *value]
        else:
            context[key] = value
    return result.content


async def _call_model(
    tenant: Tenant,
    provider: ModelProvider | None,
    model: str | None,
    temperature: float | None,
    prompt: str,
    system: str,
    agent_id: int | None,
    conversation_id: int | None,
) -> str:
    from llm.client import complete_chat, database_sync_to_async
    from llm.selectors import default_provider

    if provider is None:
        provider = await database_sync_to_async(default_provider)(tenant=tenant)
    if provider is None:
        raise StepFailed(_("This tenant has no model provider: add one in Models > Model providers."))
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    result = await complete_chat(
        tenant=tenant,
        provider=provider,
        model=model or provider.default_chat_model,
        messages=messages,
        temperature=temperature,
        purpose="chat",
        agent_id=agent_id,
        conversation_id=conversation_id,
    )
    return result.text

"""Running a parsed workflow step by step, with a log entry per step (inputs, outputs, time in ms, error).

input steps take the given inputs or the user's message; plugin and custom steps call registered tools through
`Tool.run` with validated arguments and a ToolCallContext (custom steps only registered Python functions, never
user code); llm steps send the interpolated prompt to the tenant's model; the output step gives the result.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from agents.modelcall import AgentModel, for_run
from agents.tools import ToolCallContext, ToolError, find_tool, tool_refusal
from agents.tools.invoke import invoke_tool, merge_tool_context
from agents.tools.registry import PythonFunctionTool
from agents.workflows.interpolation import InterpolationError, as_text, interpolate
from agents.workflows.schema import Step, Workflow
from core.db import database_sync_to_async
from llm import errors
from llm.errors import LLMError
from llm.messages import ChatMessage
from llm.options import ChatRequest
from llm.selectors import default_provider

if TYPE_CHECKING:
    from llm.models import ModelProvider
    from tenants.models import Tenant

StepHook = Callable[[Step, str, dict[str, Any]], Awaitable[None]]


class StepFailed(Exception):
    """A step could not run; the message says why and what to do."""


class StepAsks(Exception):
    """An input or ask step lacks variables: the run pauses with a question to the user."""

    def __init__(self, question: str, missing: list[str], found: dict[str, Any]) -> None:
        super().__init__(question)
        self.question = question
        self.missing = missing
        self.found = found


@dataclass
class WorkflowPause:
    """Where a paused run stands: the asking step, its question, what is known. JSON-able (stored in the run)."""

    step: str
    question: str
    missing: list[str]
    variables: dict[str, Any]
    context: dict[str, Any]
    asks: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "question": self.question, "missing": self.missing,
                "variables": self.variables, "context": self.context, "asks": self.asks}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkflowPause:
        return cls(
            step=str(data.get("step") or ""),
            question=str(data.get("question") or ""),
            missing=list(data.get("missing") or []),
            variables=dict(data.get("variables") or {}),
            context=dict(data.get("context") or {}),
            asks=int(data.get("asks") or 1),
        )


@dataclass
class WorkflowRunResult:
    status: str  # "completed", "failed", or "interrupted" (a step asks the user: `pause`, text = the question)
    result: Any = None
    text: str = ""
    variables: dict[str, Any] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    pause: WorkflowPause | None = None


def result_text(value: Any) -> str:
    """The output step's result as the reply text: text as is, a list one item a line, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str | int | float) for item in value):
        return "\n".join(f"- {item}" for item in value)
    if isinstance(value, dict) and len(value) == 1:
        return result_text(next(iter(value.values())))
    return json.dumps(value, ensure_ascii=False, default=str)


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, str | list | dict) and not value)


def _answer(message: str) -> tuple[str, dict[str, Any]]:
    """The text extraction rules read, and the values a message supplies by name.

    A JSON object message supplies its keys (and those of its `context` object); its text is its `userQuery` and
    `requirement` (the request a plan step sends, docs/plans.md). Otherwise the text is the message, and
    `name: value` lines supply values.
    """
    stripped = message.strip()
    if stripped.startswith("{"):
        try:
            parsed = json.loads(stripped)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            supplied = {**(parsed.get("context") if isinstance(parsed.get("context"), dict) else {}), **parsed}
            text = "\n".join(
                str(parsed[key]) for key in ("userQuery", "requirement") if isinstance(parsed.get(key), str)
            )
            return text, supplied
    supplied: dict[str, Any] = {}
    for line in message.splitlines():
        match = re.match(r"\s*([^:：=]+?)\s*[:：=]\s*(.+)$", line)
        if match:
            supplied[match.group(1)] = match.group(2).strip()
    return message, supplied


def _asked_values(
    step: Step, message: str, given: dict[str, Any], variables: dict[str, Any], *, answering: bool
) -> dict[str, Any]:
    """The variables of an input or ask step, from (in order) what is already known, the given inputs, the names
    and aliases the message supplies, the step's extraction rules and, for one variable, the whole message (an
    input step's message, or the answer to an ask step's question). Raises StepAsks for what is still missing.

    `answering`: the message answers this step's question (a resumed run), rather than being the turn's request.
    """
    names = step.outputs
    example = step.input_spec.get("example") if isinstance(step.input_spec, dict) else None
    aliases = list(example) if isinstance(example, dict) else []
    text, supplied = _answer(message)
    if step.type == "input" and len(names) == 1 and not step.extract and not answering:
        supplied = {}  # one input takes the whole message, even when it looks like JSON
    supplied = {**supplied, **given}
    values: dict[str, Any] = {}
    for position, name in enumerate(names):
        alias = aliases[position] if position < len(aliases) else None
        if _known(variables.get(name)):
            values[name] = variables[name]
        elif _known(supplied.get(name)):
            values[name] = supplied[name]
        elif alias is not None and _known(supplied.get(alias)):
            values[name] = supplied[alias]
        elif name in step.extract and (found := step.extract[name].find(text)) is not None:
            values[name] = found
        elif len(names) == 1 and name not in step.extract and (step.type == "input" or answering) and text.strip():
            values[name] = message if step.type == "input" and not answering else text.strip()
    missing = [name for name in names if name not in values]
    if missing:
        question = as_text(interpolate(step.question, variables)) if step.question else ""
        if not question:
            question = _("Please give %(names)s, each on its own line as “name: value”.") % {
                "names": ", ".join(missing)
            }
        raise StepAsks(question, missing, values)
    return values


def _assign(step: Step, value: Any) -> dict[str, Any]:
    if len(step.outputs) == 1:
        return {step.outputs[0]: value}
    if isinstance(value, dict):
        return {name: value.get(name) for name in step.outputs}
    return {step.outputs[0]: value, **{name: None for name in step.outputs[1:]}}


@dataclass
class _RunState:
    """What every step of one run shares: the result being built, the variables and tool context known so far,
    the turn's message and inputs, where a resumed run picks up, and what an llm step calls the model with."""

    run: WorkflowRunResult
    message: str
    inputs: dict[str, Any]
    resume: WorkflowPause | None
    call: ToolCallContext
    # What an llm step calls the model through: the agent's provider, model, temperature, longest reply and the
    # turn's stop signal (provider None: the tenant's default, found when a step needs it).
    model: AgentModel
    on_step: StepHook | None

    def answering(self, step: Step) -> bool:
        """The message answers this step's question (the run resumes at it)."""
        return self.resume is not None and step.id == self.resume.step


async def _step_asking(step: Step, entry: dict[str, Any], state: _RunState) -> dict[str, Any]:
    entry["inputs"] = {"message": state.message, **state.inputs}
    return _asked_values(step, state.message, state.inputs, state.run.variables, answering=state.answering(step))


async def _step_tool(step: Step, entry: dict[str, Any], state: _RunState) -> dict[str, Any]:
    arguments = interpolate(step.inputs, state.run.variables)
    entry["inputs"] = arguments
    return _assign(step, await _call_tool(step, arguments, state.call))


async def _step_llm(step: Step, entry: dict[str, Any], state: _RunState) -> dict[str, Any]:
    prompt = as_text(interpolate(step.prompt, state.run.variables))
    system = as_text(interpolate(step.system, state.run.variables)) if step.system else ""
    entry["inputs"] = {"prompt": prompt, **({"system": system} if system else {})}
    return _assign(step, await _call_model(state.model, prompt, system))


async def _step_output(step: Step, entry: dict[str, Any], state: _RunState) -> dict[str, Any]:
    values = interpolate(step.inputs, state.run.variables)
    entry["inputs"] = values
    state.run.result = next(iter(values.values())) if len(values) == 1 else values
    state.run.text = result_text(state.run.result)
    entry["outputs"] = {"result": state.run.result}
    return {}


# What each step type does; a handler fills its log entry's inputs and returns the variables the step produces.
STEP_HANDLERS: dict[str, Callable[[Step, dict[str, Any], _RunState], Awaitable[dict[str, Any]]]] = {
    "input": _step_asking,
    "ask": _step_asking,
    "plugin": _step_tool,
    "llm": _step_llm,
    "custom": _step_tool,
    "output": _step_output,
}


def _asked(step: Step, entry: dict[str, Any], ask: StepAsks, state: _RunState) -> None:
    """An asking step lacks variables: pause the run with its question, or fail once it has asked enough."""
    resume = state.resume
    asks = (resume.asks + 1) if resume is not None and state.answering(step) else 1
    if asks > step.max_asks:
        entry["error"] = ngettext(
            "Missing input: %(names)s (asked once without an answer).",
            "Missing input: %(names)s (asked %(count)s times without an answer).",
            step.max_asks,
        ) % {"names": ", ".join(ask.missing), "count": step.max_asks}
        return
    variables = state.run.variables
    variables.update(ask.found)
    entry["outputs"] = ask.found
    entry["asked"] = ask.question
    state.run.pause = WorkflowPause(step=step.id, question=ask.question, missing=ask.missing,
                                    variables=dict(variables), context=dict(state.run.context), asks=asks)  # fmt: skip


def _failed(entry: dict[str, Any], exc: Exception, run: WorkflowRunResult) -> None:
    """A tool or the model failed: the entry records it (a cancelled model call stops the run)."""
    if isinstance(exc, LLMError) and exc.code == errors.CANCELLED:
        run.status = "stopped"
        entry["error"] = str(exc.message)
    elif isinstance(exc, LLMError):
        entry["error"] = str(exc.message)
    else:
        entry["error"] = _("The step failed: %(error)s") % {"error": exc}


async def _run_step(step: Step, state: _RunState) -> dict[str, Any]:
    """Run one step through its handler; return its log entry (already in the run's log)."""
    started = time.perf_counter()
    entry: dict[str, Any] = {"step": step.id, "type": step.type, "inputs": {}, "outputs": {}, "error": ""}
    if state.on_step is not None:
        await state.on_step(step, "started", entry)
    try:
        produced = await STEP_HANDLERS[step.type](step, entry, state)
        state.run.variables.update(produced)
        if step.type != "output":
            entry["outputs"] = produced
    except StepAsks as ask:
        _asked(step, entry, ask, state)
    except (StepFailed, InterpolationError, ToolError) as exc:
        entry["error"] = str(exc)
    except Exception as exc:  # a tool or the model failed: the run records it and stops
        _failed(entry, exc, state.run)
    entry["ms"] = round((time.perf_counter() - started) * 1000, 1)
    state.run.log.append(entry)
    if state.on_step is not None:
        phase = "failed" if entry["error"] else "interrupted" if state.run.pause else "completed"
        await state.on_step(step, phase, entry)
    return entry


def _ends_run(step: Step, entry: dict[str, Any], run: WorkflowRunResult) -> bool:
    """Whether the run ends after this step (stopped, failed or paused), with its status set."""
    if run.status == "stopped":
        return True
    if entry["error"]:
        run.status = "failed"
        # The step's id is the author's identifier: code (a code span in the chat's Markdown, core.errortext).
        run.error = _("Step “%(step)s” failed: %(error)s") % {"step": f"`{step.id}`", "error": entry["error"]}
        return True
    if run.pause is not None:
        run.status = "interrupted"
        run.text = run.pause.question
        return True
    return False


async def run_workflow(
    workflow: Workflow,
    *,
    tenant: Tenant,
    message: str = "",
    inputs: dict[str, Any] | None = None,
    provider: ModelProvider | None = None,
    model: str | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    agent_id: int | None = None,
    conversation_id: int | None = None,
    user_id: int | None = None,
    on_step: StepHook | None = None,
    context: dict[str, Any] | None = None,
    resume: WorkflowPause | None = None,
    stop: asyncio.Event | None = None,
    knowledge_base_ids: tuple[int, ...] | None = None,
) -> WorkflowRunResult:
    """Run `workflow` to its output step. Never raises for a failing step: the run ends "failed" with the error
    in the result and in that step's log entry. An input or ask step that lacks a variable ends the run
    "interrupted" with its question and a `pause`; `resume=pause` (with the answer as `message`) goes on from that
    step with the variables and tool context known then, without running the earlier steps again.

    `context` is the tool context the run starts from (the conversation's, A5). Setting `stop` ends the run
    "stopped" before its next step (an llm step stops at its next chunk); the steps done so far stay in the log.
    `max_tokens` bounds each llm step's output (the workflow agent's longest reply).
    """
    variables: dict[str, Any] = dict(resume.variables) if resume else {}
    context = dict(resume.context) if resume else dict(context or {})
    run = WorkflowRunResult(status="completed", variables=variables, context=context)
    ids = [step.id for step in workflow.steps]
    if resume is not None and resume.step not in ids:
        run.status = "failed"
        run.error = _("The workflow no longer has the step “%(step)s” that asked: start again.") % {"step": resume.step}
        return run
    call = ToolCallContext(tenant=tenant, user_id=user_id, agent_id=agent_id, conversation_id=conversation_id,
                           context=context, knowledge_base_ids=knowledge_base_ids)  # fmt: skip
    seam = for_run(
        AgentModel(
            tenant=tenant,
            provider=provider,
            model=model or "",
            agent_id=agent_id,
            conversation_id=conversation_id,
            temperature=temperature,
            reply_cap=max_tokens,
            cancel=stop,
        )
    )
    state = _RunState(run=run, message=message, inputs=inputs or {}, resume=resume, call=call, model=seam,
                      on_step=on_step)  # fmt: skip
    for step in workflow.steps[ids.index(resume.step) if resume else 0 :]:
        if stop is not None and stop.is_set():
            run.status = "stopped"
            break
        entry = await _run_step(step, state)
        if _ends_run(step, entry, run):
            break
    return run


async def _call_tool(step: Step, arguments: dict[str, Any], call: ToolCallContext) -> Any:
    """A plugin or custom step's call, through the same invoke_tool as the tool loop (schema, timeout); its
    returned context joins the run's by the same rule."""
    name = step.plugin or step.function
    tool = await database_sync_to_async(find_tool)(name, tenant=call.tenant)  # a tenant's MCP tools included
    if tool is None or (step.type == "custom" and not isinstance(tool, PythonFunctionTool)):
        raise StepFailed(_("“%(name)s” is not a registered tool or function.") % {"name": name})
    if refusal := await database_sync_to_async(tool_refusal)(name, tenant=call.tenant):
        raise StepFailed(refusal)
    outcome = await invoke_tool(tool, name=name, arguments=arguments, call=replace(call, context=dict(call.context)))
    if not outcome.ok:
        raise StepFailed(outcome.error)
    if outcome.ask_user:
        raise StepFailed(outcome.ask_user)
    merged = merge_tool_context(call.context, [outcome])
    call.context.clear()
    call.context.update(merged)
    return outcome.result.content


async def _call_model(seam: AgentModel, prompt: str, system: str) -> str:
    """An llm step's model call: the prompt (after its system message), through the agent's seam."""
    if seam.provider is None:
        provider = await database_sync_to_async(default_provider)(tenant=seam.tenant)
        if provider is None:
            raise StepFailed(_("This tenant has no model provider: add one in Admin › Models › Model providers."))
        seam = replace(seam, provider=provider, model=seam.model or provider.default_chat_model)
    messages = ([ChatMessage.system(system)] if system else []) + [ChatMessage.user(prompt)]
    result = await seam.complete(ChatRequest(messages=messages))
    return result.text

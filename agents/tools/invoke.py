"""One way to call a tool, for the tool loop, workflow steps and plan steps alike (A4, A5).

`invoke_tool` checks the tool is allowed, validates the arguments against its JSON schema, runs it with the turn's
tool context under AGENT_TOOL_TIMEOUT, and turns every failure into a `ToolOutcome` whose text says what went
wrong (the model reads it as the call's result and can repair). `merge_tool_context` is the one rule by which a
tool's returned context joins the turn's: its keys replace the ones there (a tool that accumulates, such as an
outbox, reads what is there from `call.context` and returns the whole list). `tool_round` is one round of a
model's tool calls, shared by the tool loop and the goal loop: run them, and the messages that answer them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext as _

from agents import traces
from agents.tools.base import Tool, ToolCallContext, ToolError, ToolResult
from core import tracing
from core.conf import setting
from llm.messages import ChatMessage

if TYPE_CHECKING:
    from llm.client import ToolCall

logger = logging.getLogger("agents.tools")


class OutcomeStatus:
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True)
class ToolOutcome:
    """What became of one call: the text the model (or the workflow's log) gets, and the tool's result if it ran."""

    name: str
    status: str
    text: str
    arguments: dict[str, Any] = field(default_factory=dict)
    result: ToolResult | None = None
    # Why the call failed, without the "Error: " the model reads (a workflow step shows it as the step's error).
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OutcomeStatus.COMPLETED

    @property
    def ask_user(self) -> str | None:
        return self.result.ask_user if self.result is not None else None

    @property
    def context(self) -> dict[str, Any]:
        return dict(self.result.context or {}) if self.result is not None else {}


def tool_timeout() -> float:
    return float(setting("AGENT_TOOL_TIMEOUT"))


def merge_tool_context(current: dict[str, Any], outcomes: Sequence[ToolOutcome]) -> dict[str, Any]:
    """The turn's tool context after these calls, in their order: each returned key replaces the one there."""
    merged = dict(current)
    for outcome in outcomes:
        merged.update(outcome.context)
    return merged


@tracing.traced(traces.tool_name, before=traces.tool_attributes, after=traces.tool_outcome)
async def invoke_tool(
    tool: Tool | None,
    *,
    name: str,
    arguments: Any,
    call: ToolCallContext,
    arguments_error: str | None = None,
) -> ToolOutcome:
    """Run `tool` (None: not one the caller may use) with `arguments` (None or not an object: invalid, with
    `arguments_error` saying why when the caller parsed them). Never raises for the tool's failure."""
    if tool is None:
        return refused(name, _("tool %(name)s is not available to this agent.") % {"name": name})
    if not isinstance(arguments, dict):
        problem = arguments_error or _("The arguments of %(name)s must be a JSON object.") % {"name": name}
        return refused(name, _("invalid arguments for %(name)s: %(problems)s") % {"name": name, "problems": problem})
    if problems := tool.validation_errors(arguments):
        message = _("invalid arguments for %(name)s: %(problems)s") % {"name": name, "problems": "; ".join(problems)}
        return refused(name, message, arguments)
    timeout = tool_timeout()
    try:
        result = await asyncio.wait_for(tool.run(arguments, call), timeout)
    except ToolError as exc:
        return refused(name, str(exc), arguments)
    except TimeoutError:
        message = _("%(name)s did not answer within %(seconds)s seconds.") % {"name": name, "seconds": f"{timeout:g}"}
        return refused(name, message, arguments)
    except Exception:
        logger.exception("tool %s failed conversation=%s", name, call.conversation_id)
        # Said by the tool's label: people read it too (a workflow step's error, a goal run's step).
        return refused(name, _("%(name)s failed.") % {"name": tool.label()}, arguments)
    if not isinstance(result, ToolResult):
        result = ToolResult(content=result)
    return ToolOutcome(name, OutcomeStatus.COMPLETED, result.content_text(), arguments, result)


def refused(name: str, error: str, arguments: dict[str, Any] | None = None) -> ToolOutcome:
    """A call that fails with `error` (the model reads "Error: " and it, in the conversation's language) without
    running the tool."""
    text = _("Error: %(error)s") % {"error": error}
    return ToolOutcome(name, OutcomeStatus.FAILED, text, arguments or {}, error=error)


def with_call_ids(calls: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    """The model's calls, each with an id: some servers leave them out, and each result must name its call."""
    return tuple(call if call.id else replace(call, id=f"call_{uuid.uuid4().hex[:20]}") for call in calls)


def tool_message(call_id: str, text: str) -> ChatMessage:
    """The message that gives the model a call's result."""
    return ChatMessage.tool(call_id, text)


@dataclass(frozen=True)
class ToolRound:
    """One round of a model's tool calls: the calls answered, with their outcomes in the calls' order, and the
    messages that record the round for the model (the assistant message with every call, then each answer)."""

    answered: list[tuple[ToolCall, ToolOutcome]]
    messages: list[ChatMessage]

    @property
    def outcomes(self) -> list[ToolOutcome]:
        return [outcome for _call, outcome in self.answered]


async def tool_round(
    text: str,
    calls: Sequence[ToolCall],
    run_one: Callable[[ToolCall], Awaitable[ToolOutcome | None]],
    *,
    concurrently: bool,
) -> ToolRound:
    """Run a model's tool calls (`text` and `calls` are its reply) with `run_one`, all at once or one after the
    other in order; a call for which `run_one` returns None is left unanswered (its result comes later)."""
    if concurrently:
        outcomes = list(await asyncio.gather(*(run_one(call) for call in calls)))
    else:
        outcomes = [await run_one(call) for call in calls]
    answered = [(call, outcome) for call, outcome in zip(calls, outcomes, strict=True) if outcome is not None]
    messages = [
        ChatMessage.assistant(text, tool_calls=[call.as_message_part() for call in calls]),
        *(tool_message(call.id, outcome.text) for call, outcome in answered),
    ]
    return ToolRound(answered=answered, messages=messages)

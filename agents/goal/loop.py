"""Seed 3's M2 loop: plan on a goal with R, U, S, M1 and I until the goal is reached or a limit is.

One iteration is one call of the run's model (the agent's model, else its provider's planning tier) with the
seed's system prompt and the goal, then its tool calls, each through `invoke_tool`:

- `memory_recall` (R) and `memory_remember` (U) on the memory key "{agent}_{user}";
- `sleep` (S): memory.longterm.strength.sleep; the dream is recorded as a step;
- `execute_task` (M1): one call of the execution-tier model with the task and its context;
- `ask_user(tip, timeout)` (I): the run waits for the user (status waiting_for_user, no worker held); the answer,
  or NO_REPLY once the timeout passes, is the call's result and the loop goes on (agents.goal.services);
- `finish(result)`: the run is finished.

A reply without tool calls is followed by a "continue" message (the seed's loop restarts after <|im_end|>).
Before each iteration the run is read afresh: a requested stop ends it `stopped`; its limits (iterations, tokens
in the last hour, wall time since the start) end it `limit_reached`, naming the limit. Everything the loop needs
to go on is on the GoalRun row (its messages included), so any task, in any process, takes up where the last
one stopped. The clock is a parameter (tests drive it).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext

from agents.config import AgentConfig, agent_config
from agents.goal import dispatch
from agents.goal.models import GoalLimit, GoalRun, GoalRunStatus, GoalStep, GoalStepKind
from agents.goal.tools import ASK_USER, FINISH, SLEEP, ExecutionModel, goal_tools
from agents.modelcall import AgentModel, bound
from agents.tools import Tool, ToolCallContext
from agents.tools.invoke import ToolOutcome, invoke_tool, refused, tool_message, tool_round, with_call_ids
from core.db import database_sync_to_async
from llm.client import ToolCall
from llm.errors import LLMError
from llm.messages import ChatMessage, Role, wire
from llm.models import Purpose, Tier
from llm.options import ChatRequest
from llm.selectors import model_for_tier

logger = logging.getLogger(__name__)

Clock = Callable[[], dt.datetime]

# Seed 3's system prompt of M2.
SEED_PROMPT = "人生有梦、各自精彩，活下去、找到你的价值、实现你的目标"
# Added after a reply without tool calls: the loop goes on.
CONTINUE = "继续。/ Continue: take the next step towards the goal with your tools, or call finish(result)."
# A second question in one reply is refused ("Error: " and this, as the model reads a failed call).
ONE_QUESTION = "one question at a time: ask again once this one is answered."
# The newest messages sent with each call (a long run remembers the rest with memory_remember and sleep).
HISTORY_MESSAGES = 60
SUMMARY_CHARS = 500
HOUR = dt.timedelta(hours=1)


def _summary(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def system_prompt(*, goal: str, role: str = "") -> str:
    """M2's system prompt: the seed's words, the goal, the agent's own prompt, and how the loop works."""
    parts = [
        SEED_PROMPT,
        f"目标 / Goal:\n{goal}",
        (
            "你在一个循环中长期运行：用工具回忆、记住、睡眠整理记忆、执行具体任务、请求用户输入；"
            "目标实现后调用 finish。"
            " / You run in a long-lived loop: recall, remember, sleep to tidy your memory, execute concrete tasks, "
            "ask the user; call finish(result) when the goal is achieved."
        ),
    ]
    if role.strip():
        parts.append(role.strip())
    return "\n\n".join(parts)


def history_window(messages: Sequence[ChatMessage], size: int = HISTORY_MESSAGES) -> list[ChatMessage]:
    """The first message (the kickoff) and the newest `size`, never starting at a tool result (whose call would
    be cut off)."""
    messages = list(messages)
    if len(messages) <= size + 1:
        return messages
    cut = len(messages) - size
    while cut < len(messages) and messages[cut].role == Role.TOOL:
        cut += 1
    return [messages[0], *messages[cut:]]


@dataclass(frozen=True)
class RunSetup:
    """What a task's iterations run with, read once: the run's owners, M2, M1 and the tools."""

    run_id: int
    tenant: Any
    agent_id: int
    user_id: int
    goal: str
    config: AgentConfig
    m2: AgentModel  # the run's model: the agent's own, else its provider's planning tier (agents.modelcall)
    tools: dict[str, Tool]


def run_setup(run: GoalRun) -> RunSetup:
    agent = run.agent
    config = agent_config(agent=agent, version=agent.published_version())
    provider = config.provider
    model = config.model
    if provider is not None and not config.model_is_own:
        model = provider.model_for_tier(Tier.PLANNING)
    choice = model_for_tier(tenant=agent.tenant, tier=Tier.EXECUTION, provider=provider)
    execution = ExecutionModel(choice.provider, choice.model) if choice else ExecutionModel(None, "")
    return RunSetup(
        run_id=run.pk,
        tenant=agent.tenant,
        agent_id=agent.pk,
        user_id=run.user_id,
        goal=run.goal,
        config=config,
        m2=AgentModel.of(config, tenant=agent.tenant, model=model, purpose=Purpose.PLAN),
        tools=goal_tools(execution),
    )


@dataclass
class Iteration:
    """What one iteration did, saved in one transaction at its end."""

    number: int
    messages: list[ChatMessage]  # the run's conversation, GoalRun.messages typed
    steps: list[GoalStep] = field(default_factory=list)
    tool_calls: int = 0
    dreams: int = 0
    tokens: int = 0
    finish: str | None = None
    ask: tuple[str, str, float] | None = None  # (tip, tool call id, timeout seconds)
    failure: str = ""

    def step(self, kind: str, name: str, *, at: dt.datetime, arguments: dict[str, Any] | None = None,
             summary: str = "", ok: bool = True, tokens: int = 0, duration_ms: int = 0) -> None:  # fmt: skip
        self.steps.append(
            GoalStep(iteration=self.number, kind=kind, name=name[:100], arguments=arguments or {},
                     summary=_summary(summary), ok=ok, tokens=tokens, duration_ms=duration_ms, at=at)
        )  # fmt: skip
        self.tokens += tokens


def tokens_in_last_hour(*, run: GoalRun, now: dt.datetime) -> int:
    """The tokens the run's model calls used in the hour before `now` (its steps' tokens)."""
    total = GoalStep.objects.filter(run=run, at__gt=now - HOUR).aggregate(total=Sum("tokens"))["total"]
    return total or 0


def limit_hit(run: GoalRun, now: dt.datetime) -> str:
    """The limit the run has reached at `now` ("" while within all of them)."""
    if run.iterations >= run.max_iterations:
        return GoalLimit.ITERATIONS
    if (now - run.started_at).total_seconds() >= run.max_wall_seconds:
        return GoalLimit.WALL_TIME
    if tokens_in_last_hour(run=run, now=now) >= run.max_tokens_per_hour:
        return GoalLimit.TOKENS_PER_HOUR
    return ""


def _end(run: GoalRun, status: str, now: dt.datetime, **fields: Any) -> None:
    run.status = status
    run.ended_at = now
    for name, value in fields.items():
        setattr(run, name, value)
    run.save(update_fields=["status", "ended_at", "updated_at", *fields])


@transaction.atomic
def begin_iteration(run_id: int, now: dt.datetime) -> GoalRun | None:
    """The run, if another iteration may start now; otherwise None, the run ended as its flag or limits say."""
    run = GoalRun.objects.select_for_update().filter(pk=run_id).first()
    if run is None or run.status != GoalRunStatus.RUNNING:
        return None
    if run.stop_requested:
        _end(run, GoalRunStatus.STOPPED, now)
        return None
    if limit := limit_hit(run, now):
        _end(run, GoalRunStatus.LIMIT_REACHED, now, limit_reached=limit)
        return None
    return run


@transaction.atomic
def save_iteration(run_id: int, iteration: Iteration, now: dt.datetime) -> str:
    """Store what the iteration did and where the run goes next; returns the run's status. A run stopped (or
    ended) meanwhile keeps its status: the steps and counters are still stored."""
    run = GoalRun.objects.select_for_update().get(pk=run_id)
    for step in iteration.steps:
        step.tenant_id, step.run = run.tenant_id, run
    GoalStep.objects.bulk_create(iteration.steps)
    run.iterations = max(run.iterations, iteration.number)
    run.tool_calls += iteration.tool_calls
    run.dreams += iteration.dreams
    run.tokens += iteration.tokens
    fields = ["iterations", "tool_calls", "dreams", "tokens", "updated_at"]
    if run.status == GoalRunStatus.RUNNING:
        run.messages = wire(iteration.messages)
        fields.append("messages")
        if iteration.failure:
            run.status, run.error, run.ended_at = GoalRunStatus.FAILED, iteration.failure, now
            fields += ["status", "error", "ended_at"]
        elif iteration.finish is not None:
            run.status, run.result, run.ended_at = GoalRunStatus.FINISHED, iteration.finish, now
            fields += ["status", "result", "ended_at"]
        elif iteration.ask is not None:
            tip, call_id, seconds = iteration.ask
            run.status, run.question, run.ask_call_id = GoalRunStatus.WAITING_FOR_USER, tip, call_id
            run.asked_at, run.ask_deadline = now, now + dt.timedelta(seconds=seconds)
            fields += ["status", "question", "ask_call_id", "asked_at", "ask_deadline"]
            tenant_id, asked_at = run.tenant_id, now.isoformat()
            transaction.on_commit(
                lambda: dispatch.schedule_ask_timeout(
                    tenant_id=tenant_id, run_id=run_id, asked_at=asked_at, seconds=seconds
                )
            )
    run.save(update_fields=fields)
    return run.status


class GoalLoop:
    """A task's share of one run's loop: up to `iterations` iterations, each begun by a fresh look at the run."""

    def __init__(self, setup: RunSetup, *, clock: Clock = timezone.now) -> None:
        self.setup = setup
        self.clock = clock
        self.schemas = [tool.openai_schema(setup.config.language) for tool in setup.tools.values()]
        self.call = ToolCallContext(
            tenant=setup.tenant, user_id=setup.user_id, agent_id=setup.agent_id, context={"goal_run_id": setup.run_id}
        )

    async def advance(self, iterations: int) -> bool:
        """Run up to `iterations` iterations; True when the run goes on (the caller queues the next task)."""
        for _ in range(iterations):
            run = await database_sync_to_async(begin_iteration)(self.setup.run_id, self.clock())
            if run is None:
                return False
            with bound(self.setup.m2):  # execute_task calls the execution tier as the run's agent
                iteration = await self.iterate(run)
            status = await database_sync_to_async(save_iteration)(self.setup.run_id, iteration, self.clock())
            if status != GoalRunStatus.RUNNING:
                return False
        return True

    async def iterate(self, run: GoalRun) -> Iteration:
        """One model call and its tool calls."""
        setup = self.setup
        iteration = Iteration(number=run.iterations + 1, messages=[ChatMessage.from_dict(m) for m in run.messages])
        if setup.config.provider is None:
            iteration.failure = gettext(
                "This tenant has no model provider: add one in Admin › Models › Model providers."
            )
            return iteration
        messages = [
            ChatMessage.system(system_prompt(goal=setup.goal, role=setup.config.system_prompt)),
            *history_window(iteration.messages),
        ]
        started = time.perf_counter()
        try:
            reply = await setup.m2.complete(ChatRequest(messages=messages, tools=self.schemas))
        except LLMError as exc:
            iteration.step(GoalStepKind.MODEL, setup.m2.model, at=self.clock(), summary=exc.message, ok=False,
                           duration_ms=_ms(started))  # fmt: skip
            iteration.failure = exc.message
            return iteration
        calls = with_call_ids(reply.tool_calls)
        said = reply.text.strip()
        iteration.step(
            GoalStepKind.MODEL,
            setup.m2.model,
            at=self.clock(),
            summary=said or "→ " + ", ".join(call.name for call in calls),
            tokens=reply.usage.total_tokens,
            duration_ms=reply.duration_ms,
        )
        if not calls:
            iteration.messages += [ChatMessage.assistant(reply.text), ChatMessage.user(CONTINUE)]
            return iteration
        # Every call in order but the question, which comes last and leaves its result open (unless the run ended).
        asks = [call for call in calls if call.name == ASK_USER]

        async def run_one(call: ToolCall) -> ToolOutcome | None:
            if call.name == ASK_USER:
                return None if call is asks[0] else refused(call.name, ONE_QUESTION)
            outcome = await self._run(iteration, call)
            if call.name == FINISH and outcome.ok and iteration.finish is None:
                iteration.finish = outcome.context["finish"]
            return outcome

        iteration.messages += (await tool_round(reply.text, calls, run_one, concurrently=False)).messages
        if asks:
            await self._ask(iteration, asks[0])
        return iteration

    async def _ask(self, iteration: Iteration, ask: ToolCall) -> None:
        """The run's question: the run waits for the user, or the call is answered at once (the run finished, or
        the question was refused)."""
        if iteration.finish is not None:
            iteration.messages.append(tool_message(ask.id, "Error: finished."))
            return
        outcome = await self._run(iteration, ask, kind=GoalStepKind.ASK)
        if outcome.ok and outcome.ask_user:
            iteration.ask = (outcome.ask_user, ask.id, float(outcome.context["timeout"]))
        else:
            iteration.messages.append(tool_message(ask.id, outcome.text))

    async def _run(self, iteration: Iteration, call: ToolCall, *, kind: str = GoalStepKind.TOOL) -> ToolOutcome:
        started = time.perf_counter()
        outcome = await invoke_tool(
            self.setup.tools.get(call.name),
            name=call.name,
            arguments=call.parsed_arguments,
            call=self.call,
            arguments_error=call.arguments_error,
        )
        iteration.tool_calls += 1
        context = outcome.context
        dream = context.get("dream") if call.name == SLEEP else None
        if dream:
            kind = GoalStepKind.DREAM
            iteration.dreams += 1
        summary = dream or (outcome.ask_user if kind == GoalStepKind.ASK and outcome.ok else outcome.text)
        iteration.step(kind, call.name, at=self.clock(), arguments=outcome.arguments or call.parsed_arguments or {},
                       summary=summary, ok=outcome.ok, tokens=int(context.get("tokens") or 0),
                       duration_ms=_ms(started))  # fmt: skip
        return outcome


def _ms(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def load_setup(run_id: int) -> RunSetup | None:
    run = GoalRun.objects.select_related("agent__tenant").filter(pk=run_id).first()
    return run_setup(run) if run is not None else None


async def advance_run(*, run_id: int, iterations: int, clock: Clock = timezone.now) -> bool:
    """Up to `iterations` iterations of run `run_id` (inside its tenant's scope); True when it goes on. An
    unexpected failure ends the run `failed` (logged) rather than leaving it running with no loop."""
    setup = await database_sync_to_async(load_setup)(run_id)
    if setup is None:
        return False
    try:
        return await GoalLoop(setup, clock=clock).advance(iterations)
    except Exception:
        logger.exception("goal run %s failed", run_id)
        message = gettext("The loop failed unexpectedly; the server log has the details.")
        await database_sync_to_async(fail_run)(run_id, clock(), message)
        return False


@transaction.atomic
def fail_run(run_id: int, now: dt.datetime, message: str) -> None:
    run = GoalRun.objects.select_for_update().filter(pk=run_id).first()
    if run is not None and run.active:
        _end(run, GoalRunStatus.FAILED, now, error=message)

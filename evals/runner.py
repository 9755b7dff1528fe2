"""Runs of a dataset against one version of its agent (the draft or a published version): started by `run_start`
(which warns first when the tenant's budget may not cover it), executed in the background (`execute`, a Celery task
or, in eager mode, a line of this process's threads), stopped by `run_stop`, read by `run_progress`.

Each case runs in its own conversation (source "eval": no long-term memory, never in a person's lists), its turns
posted through the engine's one admission (engine.admission.admit) as an EVAL caller, so a run obeys the tenant's
budget like any other door: a refusal (the budget spent) ends the run with its words, and what was done is kept.
At most `run.concurrency` cases run at once; a stop lets the cases under way finish and starts no other.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from celery import current_app
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.config import agent_config
from agents.models import AgentVersion
from agents.runtime import TurnResult, TurnStatus
from agents.services import conversation_start
from core.background import BackgroundLine
from core.conf import setting
from core.db import database_sync_to_async
from engine.admission import Admitted, Caller, CallerKind, Refusal, RefusalCode, Target, admit
from evals.expectations import Observed, ToolCalled, check_all
from evals.judge import Judge, judge_for
from evals.models import Case, CaseResult, Dataset, ExpectationKind, ResultStatus, Run, RunStatus
from llm import errors, tokens
from llm.errors import LLMError
from llm.selectors import tokens_used_this_month
from memory.models import Conversation, ConversationSource, Message, Role
from tenants.access import may_administer
from tenants.models import Membership, Tenant
from tenants.scope import tenant_scope

logger = logging.getLogger("evals.runner")

# The run's Celery task (evals.tasks), by name: the task calls `execute` here, so this module does not import it.
RUN_TASK = "evals.run"
# Eager mode (the embedded default): runs go to these background threads, so the request that starts one returns.
run_line = BackgroundLine("eval-run", threads=2)

# Tokens a reply is assumed to take in the estimate when the agent sets no cap, and what a judge's score takes.
REPLY_ALLOWANCE = 512
JUDGE_ALLOWANCE = 300
# A turn refused because this process had no place for it (overloaded) is tried again this many times.
OVERLOADED_RETRIES = 20
ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING)
# A knowledge citation in a reply, as the knowledge tool asks for it: [menu.json #2].
CITATION = re.compile(r"\[([^\[\]#\n]+?)\s*#\d+\]")


class RunRefused(ValueError):
    """A run that cannot start; `message` says why and what to do (in the active language)."""

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class BudgetWarning(Exception):
    """The run may use more tokens (`estimate`) than the tenant has left this month (`remaining`): start it only
    when the person confirms (run_start's `confirm_budget`)."""

    def __init__(self, estimate: int, remaining: int) -> None:
        self.estimate = estimate
        self.remaining = remaining
        super().__init__(self.message)

    @property
    def message(self) -> str:
        return _(
            "This run may use about %(estimate)s tokens, more than the %(remaining)s left of this tenant's monthly "
            "budget. Start it anyway? It ends, keeping what it did, when the budget is spent."
        ) % {"estimate": f"{self.estimate:,}", "remaining": f"{max(self.remaining, 0):,}"}


# --- starting, stopping, reading -------------------------------------------------------------------------------


def _has_rubric(expectations: list[dict[str, Any]]) -> bool:
    return any(item.get("kind") == ExpectationKind.RUBRIC for item in expectations)


def budget_estimate(*, dataset: Dataset, version: AgentVersion | None) -> int:
    """The tokens a run of `dataset` may use: the last finished run's tokens per case when there is one, else each
    turn's prompt (the system prompt, the turns before it and their replies) and reply, and a judge's score per
    rubric."""
    cases = list(dataset.cases.values_list("turns", "expectations"))
    previous = Run.objects.filter(dataset=dataset, status=RunStatus.DONE, done__gt=0).order_by("-id").first()
    if previous is not None:
        return int((previous.tokens + previous.judge_tokens) / previous.done * len(cases))
    config = agent_config(agent=dataset.agent, version=version)
    reply = config.max_reply_tokens or REPLY_ALLOWANCE
    system = tokens.count_text(config.system_prompt)
    total = 0
    for turns, expectations in cases:
        history = system
        for turn in turns:
            history += tokens.count_text(turn)
            total += history + reply
            history += reply
        if _has_rubric(expectations):
            total += history + JUDGE_ALLOWANCE
    return total


def _check_start(dataset: Dataset, version: AgentVersion | None, user: Any) -> None:
    """RunRefused when the run cannot start (the dataset locked by the caller's transaction)."""
    if version is not None and version.agent_id != dataset.agent_id:
        raise RunRefused(_("That version belongs to another agent: choose one of this agent's versions."))
    membership = Membership.objects.filter(tenant_id=dataset.tenant_id, user_id=getattr(user, "pk", None)).first()
    if not may_administer(user=user, membership=membership):
        raise RunRefused(_("Only the tenant's owners and administrators run evaluations."))
    if not dataset.cases.exists():
        raise RunRefused(_("The dataset “%(name)s” has no cases: add one first.") % {"name": dataset.name})
    running = Run.objects.filter(dataset=dataset, version=version, status__in=ACTIVE, stop_requested=False).first()
    if running is not None:
        raise RunRefused(
            _("This dataset is already running on this version (run #%(run)s): wait for it to end or stop it.")
            % {"run": running.pk}
        )


def run_start(
    *,
    dataset: Dataset,
    version: AgentVersion | None,
    user: Any,
    concurrency: int = 4,
    confirm_budget: bool = False,
    queue: bool = True,
) -> Run:
    """Start a run of `dataset` against `version` (None: the draft as it is now, kept in the run's snapshot); it
    runs in the background (`queue=False`: the caller runs it, `execute`, as manage.py eval_run does). RunRefused
    when it cannot start; BudgetWarning when it may use more tokens than the tenant has left and `confirm_budget` is
    not set."""
    tenant = dataset.tenant
    with transaction.atomic():
        Dataset.objects.select_for_update().filter(pk=dataset.pk).first()  # two starts at once: one run
        _check_start(dataset, version, user)
        estimate = budget_estimate(dataset=dataset, version=version)
        remaining = tenant.monthly_token_budget - tokens_used_this_month(tenant=tenant)
        if estimate > remaining and not confirm_budget:
            raise BudgetWarning(estimate, remaining)
        agent = dataset.agent
        run = Run.objects.create(
            tenant=tenant,
            dataset=dataset,
            agent=agent,
            version=version,
            snapshot=agent.snapshot() if version is None else {},
            concurrency=max(1, min(int(concurrency), setting("EVAL_MAX_CONCURRENCY"))),
            total=dataset.cases.count(),
            started_by=user,
        )
        if queue:
            transaction.on_commit(partial(queue_run, tenant_id=tenant.pk, run_id=run.pk))
    return run


def queue_run(*, tenant_id: int, run_id: int) -> str:
    """Queue the run's task; returns where it runs: "celery" or "thread" (eager mode)."""
    task = current_app.tasks[RUN_TASK]
    if current_app.conf.task_always_eager:
        run_line.submit(task, tenant_id, run_id)
        return "thread"
    task.delay(tenant_id, run_id)
    return "celery"


def run_stop(*, run: Run) -> Run:
    """Ask the run to stop: the cases under way finish, no other starts, what it did is kept. A run not started
    yet stops at once."""
    Run.objects.filter(pk=run.pk).update(stop_requested=True)
    Run.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(status=RunStatus.STOPPED, finished_at=timezone.now())
    run.refresh_from_db()
    return run


def run_progress(run: Run) -> dict[str, Any]:
    """The run as its page polls it: counters, pass rate, whether it ended (and why), each case's status."""
    run.refresh_from_db()
    results = list(run.results.order_by("position", "id").values("position", "title", "status"))
    return {
        "id": run.pk,
        "status": run.status,
        "done": run.done,
        "total": run.total,
        "passed": run.passed,
        "failed": run.failed,
        "errored": run.errored,
        "pass_rate": run.pass_rate,
        "tokens": run.tokens,
        "judge_tokens": run.judge_tokens,
        "finished": run.finished,
        "stop_requested": run.stop_requested,
        "error": run.error,
        "results": results,
    }


# --- execution -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Case:
    pk: int
    position: int
    title: str
    turns: list[str]
    expectations: list[dict[str, Any]]


@dataclass
class _Plan:
    """What a run's workers share: the run, its caller, the cases left, the judge, and why it ended (if it did)."""

    run: Run
    caller: Caller
    cases: list[_Case]
    judge: Judge | None
    ended: str = ""
    ended_code: str = ""
    stopped: bool = False


@dataclass(frozen=True)
class RunEnd:
    """How `execute` ended a run: its status, and when something ended it early, that refusal's code
    (engine.admission.RefusalCode, or llm.errors' quota_exceeded) and words."""

    status: RunStatus
    code: str = ""
    words: str = ""


@dataclass
class _Outcome:
    """One case as it ran: its reply and tokens, or the error that ended it; `ends_run`: words that end the run."""

    conversation: Conversation | None = None
    observed: Observed | None = None
    result: TurnResult | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: int = 0
    error: str = ""
    ends_run: str = ""
    ends_code: str = ""
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    judge_tokens: int = 0


def _begin(run_id: int, tenant_id: int) -> _Plan | None:
    """Mark the run as running and read what it needs; None when it is not to run (ended, stopped, gone)."""
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
        return None
    with tenant_scope(tenant):
        run = (
            Run.objects.select_related("dataset", "agent", "version", "started_by", "tenant").filter(pk=run_id).first()
        )
        if run is None or run.finished:
            return None
        if run.stop_requested:
            Run.objects.filter(pk=run.pk).update(status=RunStatus.STOPPED, finished_at=timezone.now())
            return None
        user = run.started_by
        membership = Membership.objects.filter(tenant=tenant, user_id=getattr(user, "pk", None)).first()
        caller = Caller(tenant=tenant, source=ConversationSource.EVAL, kind=CallerKind.EVAL, user=user,
                        membership=membership)  # fmt: skip
        done = set(run.results.values_list("case_id", flat=True))
        cases = [
            _Case(case.pk, case.position, case.title or str(case), list(case.turns), list(case.expectations))
            for case in Case.objects.filter(dataset=run.dataset).order_by("position", "id")
            if case.pk not in done
        ]
        judge = judge_for(run.dataset) if any(_has_rubric(case.expectations) for case in cases) else None
        Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, started_at=timezone.now())
        run.status = RunStatus.RUNNING
        if user is None or not may_administer(user=user, membership=membership):
            run.error = _("The person who started this run is no longer an administrator of the tenant.")
            return _Plan(run, caller, [], judge, ended=run.error)
        return _Plan(run, caller, cases, judge)


async def execute(run_id: int, tenant_id: int) -> RunEnd | None:
    """Run what is left of the run (module docstring); how it ended (None: it was not to run)."""
    plan = await database_sync_to_async(_begin)(run_id, tenant_id)
    if plan is None:
        return None
    try:
        workers = [asyncio.ensure_future(_worker(plan)) for _ in range(max(1, plan.run.concurrency))]
        await asyncio.gather(*workers)
    except Exception as exc:
        logger.exception("evaluation run %s failed", run_id)
        plan.ended = _("The run broke off: %(error)s") % {"error": exc}
        await database_sync_to_async(_finish)(plan, RunStatus.FAILED)
        raise
    status = RunStatus.STOPPED if plan.stopped or plan.ended else RunStatus.DONE
    await database_sync_to_async(_finish)(plan, status)
    return RunEnd(status, plan.ended_code, plan.ended)


def _finish(plan: _Plan, status: RunStatus) -> None:
    with tenant_scope(plan.caller.tenant):
        Run.objects.filter(pk=plan.run.pk).update(status=status, error=plan.ended, finished_at=timezone.now())


async def _worker(plan: _Plan) -> None:
    """Take the next case until none is left, the run is asked to stop (read as each case is stored), or something
    ended it."""
    while plan.cases and not plan.ended and not plan.stopped:
        case = plan.cases.pop(0)
        outcome = await _run_case(plan, case)
        if outcome.ends_run and not plan.ended:
            plan.ended, plan.ended_code = outcome.ends_run, outcome.ends_code
        if outcome.result is not None or not outcome.ends_run:
            plan.stopped = await database_sync_to_async(_store)(plan, case, outcome) or plan.stopped
        elif outcome.conversation is not None:
            await database_sync_to_async(_forget)(plan, outcome.conversation)


def _conversation(plan: _Plan, case: _Case) -> Conversation:
    run = plan.run
    title = f"{run.dataset.name} #{run.pk}: {case.title}"[:200]
    with tenant_scope(plan.caller.tenant):
        return conversation_start(agent=run.agent, user=run.started_by, title=title, version=run.version,
                                  draft=run.version is None, source=ConversationSource.EVAL)  # fmt: skip


def _forget(plan: _Plan, conversation: Conversation) -> None:
    """A case the run ended on (its first turn refused): its empty conversation goes."""
    with tenant_scope(plan.caller.tenant):
        if not Message.objects.filter(conversation=conversation).exists():
            Conversation.objects.filter(pk=conversation.pk).delete()


async def _admit(plan: _Plan, conversation: Conversation, content: str, client_id: str) -> Admitted | Refusal:
    """The engine's admission, tried again while this process has no place for the turn."""
    for _attempt in range(OVERLOADED_RETRIES):
        answer = await admit(
            caller=plan.caller, target=Target(conversation=conversation), content=content, client_id=client_id
        )
        if not (isinstance(answer, Refusal) and answer.code in (RefusalCode.OVERLOADED, RefusalCode.BUSY)):
            return answer
        await asyncio.sleep(min(answer.retry_after or 1, 1))
    return answer


async def _run_case(plan: _Plan, case: _Case) -> _Outcome:
    """The case's turns in its own conversation, then its verdicts."""
    outcome = _Outcome(conversation=await database_sync_to_async(_conversation)(plan, case))
    started = time.monotonic()
    user_message_id = 0
    for index, turn in enumerate(case.turns):
        admitted = await _admit(plan, outcome.conversation, turn, f"eval-{plan.run.pk}-{case.pk}-{index}")
        if isinstance(admitted, Refusal):
            with tenant_scope(plan.caller.tenant):
                outcome.ends_run, outcome.ends_code = admitted.message, admitted.code
            return outcome
        user_message_id = admitted.submission.message.pk
        result = await admitted.submission.task if admitted.submission.task is not None else None
        if result is None:
            outcome.error = _("The turn broke off without a reply (see the server log).")
            break
        outcome.result = result
        outcome.tokens_in += result.usage.prompt_tokens
        outcome.tokens_out += result.usage.completion_tokens
        if result.status == TurnStatus.FAILED:
            words = errors.message_for(result.error_code or errors.PROVIDER_ERROR)
            if result.error_code == errors.QUOTA_EXCEEDED:
                outcome.ends_run, outcome.ends_code = words, errors.QUOTA_EXCEEDED
            outcome.error = words
            break
    outcome.latency_ms = int((time.monotonic() - started) * 1000)
    if outcome.error:
        return outcome
    if any(item.get("kind") == ExpectationKind.TOOL_CALLED for item in case.expectations):
        outcome.observed = await database_sync_to_async(_observed)(plan, outcome.result, user_message_id)
    else:  # no expectation reads the turn's tool calls: no query for them
        outcome.observed = _observed_reply(outcome.result)
    try:
        verdicts, outcome.judge_tokens = await check_all(
            case.expectations, outcome.observed, turns=case.turns, judge=plan.judge
        )
    except LLMError as exc:  # the judge's model call: its budget spent ends the run; another error, the case
        outcome.error = errors.message_for(exc.code)
        if exc.code == errors.QUOTA_EXCEEDED:
            outcome.ends_run, outcome.ends_code = outcome.error, errors.QUOTA_EXCEEDED
        return outcome
    except Exception as exc:  # a judge that broke: the case is an error, the run goes on
        logger.warning("evaluation run %s case %s: verdicts failed", plan.run.pk, case.pk, exc_info=True)
        outcome.error = _("The expectations could not be checked: %(error)s") % {"error": exc}
        return outcome
    outcome.verdicts = [verdict.as_json() for verdict in verdicts]
    return outcome


def _tool_calls(parts: Any) -> list[ToolCalled]:
    """A stored assistant message's tool calls (the OpenAI form) as the expectations read them."""
    called = []
    for part in parts or []:
        function = part.get("function", part) if isinstance(part, dict) else {}
        arguments = function.get("arguments") or {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = {"_raw": arguments}
        called.append(ToolCalled(name=str(function.get("name", "")),
                                 arguments=arguments if isinstance(arguments, dict) else {}))  # fmt: skip
    return called


def _observed_reply(result: TurnResult, called: tuple[ToolCalled, ...] = ()) -> Observed:
    """What the last turn showed: its reply, the tools it called, the sources it cited, how it finished."""
    reply = result.message.content
    cited = tuple(dict.fromkeys(name.strip() for name in CITATION.findall(reply)))
    return Observed(reply=reply, tool_calls=called, citations=cited, finish_reason=result.finish_reason,
                    refused=result.finish_reason == "content_filter")  # fmt: skip


def _observed(plan: _Plan, result: TurnResult, user_message_id: int) -> Observed:
    """_observed_reply with the tools called in the turn (the assistant messages stored after its user message)."""
    with tenant_scope(plan.caller.tenant):
        parts = Message.objects.filter(
            conversation_id=result.message.conversation_id, id__gt=user_message_id, role=Role.ASSISTANT
        ).values_list("tool_calls", flat=True)
        called = tuple(call for stored in parts for call in _tool_calls(stored))
    return _observed_reply(result, called)


def _trace_id(result: TurnResult | None) -> str:
    """The turn's trace (W3C traceparent's trace id) when traces were on."""
    parts = (result.message.trace_parent if result is not None else "").split("-")
    return parts[1] if len(parts) == 4 else ""


def _store(plan: _Plan, case: _Case, outcome: _Outcome) -> bool:
    """The case's result, and the run's counters moved in the same transaction; True when the run was asked to
    stop."""
    if outcome.error:
        status = ResultStatus.ERROR
    elif all(verdict.get("passed") for verdict in outcome.verdicts):
        status = ResultStatus.PASSED
    else:
        status = ResultStatus.FAILED
    counter = {ResultStatus.PASSED: "passed", ResultStatus.FAILED: "failed", ResultStatus.ERROR: "errored"}[status]
    with tenant_scope(plan.caller.tenant), transaction.atomic():
        CaseResult.objects.create(
            tenant=plan.caller.tenant,
            run=plan.run,
            case_id=case.pk,
            position=case.position,
            title=case.title[:200],
            status=status,
            reply=outcome.result.message.content if outcome.result is not None else "",
            verdicts=outcome.verdicts,
            tokens_in=outcome.tokens_in,
            tokens_out=outcome.tokens_out,
            judge_tokens=outcome.judge_tokens,
            latency_ms=outcome.latency_ms,
            conversation=outcome.conversation,
            trace_id=_trace_id(outcome.result),
            error=outcome.error,
        )
        Run.objects.filter(pk=plan.run.pk).update(
            done=F("done") + 1,
            tokens=F("tokens") + outcome.tokens_in + outcome.tokens_out,
            judge_tokens=F("judge_tokens") + outcome.judge_tokens,
            **{counter: F(counter) + 1},
        )
        return Run.objects.filter(pk=plan.run.pk, stop_requested=True).exists()

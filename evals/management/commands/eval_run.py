"""`manage.py eval_run`: run an agent's dataset in the foreground and exit by its pass rate, for a team's own CI.

Exit codes: 0 the run finished and its pass rate reaches --threshold; 1 under it, or the run did not finish (the
budget spent, stopped); 2 bad arguments (no such tenant, agent, dataset or version; a budget warning without --yes).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from asgiref.sync import async_to_sync
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.models import Agent, AgentVersion
from core.db import database_sync_to_async
from evals.models import Dataset, Run, RunStatus
from evals.runner import BudgetWarning, RunRefused, execute, run_progress, run_start
from tenants.models import Membership, Role, Tenant
from tenants.scope import tenant_scope

BAD_ARGUMENTS = 2
UNDER_THRESHOLD = 1
PROGRESS_SECONDS = 1.0


def _bad(message: str) -> CommandError:
    return CommandError(message, returncode=BAD_ARGUMENTS)


def _agent(name_or_id: str) -> Agent:
    agents = Agent.objects.all()
    found = agents.filter(pk=int(name_or_id)).first() if name_or_id.isdigit() else None
    found = found or agents.filter(name=name_or_id).first()
    if found is None:
        raise _bad(f"No agent {name_or_id!r} in this tenant.")
    return found


def _version(agent: Agent, asked: str) -> AgentVersion | None:
    """None for the draft; the newest published version for "published"; version N for a number."""
    if asked == "draft":
        return None
    version = agent.published_version() if asked == "published" else None
    if asked.isdigit():
        version = agent.versions.filter(number=int(asked)).first()
    if version is None:
        raise _bad(f"Agent {agent.name!r} has no version {asked!r}: give draft, published or a published number.")
    return version


def _runner(tenant: Tenant) -> Any:
    """Who the run is started by: the tenant's first owner, else its first administrator."""
    memberships = Membership.objects.filter(tenant=tenant, user__is_active=True).select_related("user").order_by("id")
    membership = memberships.filter(role=Role.OWNER).first() or memberships.filter(role=Role.ADMIN).first()
    if membership is None:
        raise _bad(f"Tenant {tenant.slug!r} has no owner or administrator to run the evaluation as.")
    return membership.user


class Command(BaseCommand):
    help = "Run an agent's evaluation dataset in the foreground; exit 0 at or above --threshold, 1 under, 2 bad args."

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        # --version names the agent's version here, not Django's version.
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="The tenant's slug.")
        parser.add_argument("--agent", required=True, help="The agent's name or id.")
        parser.add_argument("--dataset", required=True, help="The dataset's name.")
        parser.add_argument("--version", default="draft", help="draft (default), published, or a version number.")
        parser.add_argument("--threshold", type=float, default=0.8, help="The pass rate needed (0-1, default 0.8).")
        parser.add_argument("--concurrency", type=int, default=4, help="Cases at once (default 4).")
        parser.add_argument("--json", action="store_true", help="Print the summary as JSON, without progress lines.")
        parser.add_argument("--yes", action="store_true", help="Run even when it may pass the tenant's budget.")

    def handle(self, *args: Any, **options: Any) -> None:
        if not 0 <= options["threshold"] <= 1:
            raise _bad("--threshold is a pass rate between 0 and 1 (0.8 = 80%).")
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise _bad(f"No tenant {options['tenant']!r}.")
        with tenant_scope(tenant):
            run = self._start(tenant, options)
            async_to_sync(self._run)(run, tenant, quiet=options["json"])
            summary = run_progress(run)
        passed = summary["status"] == RunStatus.DONE and (summary["pass_rate"] or 0.0) >= options["threshold"]
        summary.update(threshold=options["threshold"], passed_threshold=passed)
        if options["json"]:
            self.stdout.write(json.dumps(summary, ensure_ascii=False, indent=2))
        else:
            self._summary(summary)
        if not passed:
            raise SystemExit(UNDER_THRESHOLD)

    def _start(self, tenant: Tenant, options: dict[str, Any]) -> Run:
        agent = _agent(options["agent"])
        dataset = Dataset.objects.filter(agent=agent, name=options["dataset"]).first()
        if dataset is None:
            raise _bad(f"Agent {agent.name!r} has no dataset {options['dataset']!r}.")
        version = _version(agent, options["version"])
        try:
            return run_start(dataset=dataset, version=version, user=_runner(tenant),
                             concurrency=options["concurrency"], confirm_budget=options["yes"],
                             queue=False)  # fmt: skip
        except BudgetWarning as warning:
            raise _bad(f"{warning.message} (run again with --yes)") from None
        except RunRefused as refused:
            raise _bad(refused.message) from None

    async def _run(self, run: Run, tenant: Tenant, *, quiet: bool) -> None:
        """Execute the run here, printing a line each time another case is done."""
        work = asyncio.ensure_future(execute(run.pk, tenant.pk))
        shown = -1
        while not work.done():
            await asyncio.wait([work], timeout=PROGRESS_SECONDS)
            progress = await database_sync_to_async(run_progress)(run)
            if not quiet and progress["done"] != shown:
                shown = progress["done"]
                self.stdout.write(
                    f"{progress['done']}/{progress['total']}  passed {progress['passed']}  failed {progress['failed']}"
                    f"  errors {progress['errored']}"
                )
        await work

    def _summary(self, summary: dict[str, Any]) -> None:
        rate = summary["pass_rate"]
        self.stdout.write(
            f"Run #{summary['id']} {summary['status']}: {summary['passed']}/{summary['total']} passed "
            f"({'-' if rate is None else f'{rate:.0%}'}; needed {summary['threshold']:.0%}), "
            f"{summary['tokens']} tokens + {summary['judge_tokens']} judge tokens."
        )
        if summary["error"]:
            self.stdout.write(f"Ended: {summary['error']}")
        for result in summary["results"]:
            if result["status"] != "passed":
                self.stdout.write(f"  {result['status']}: #{result['position']} {result['title']}")
        self.stdout.write(self.style.SUCCESS("PASS") if summary["passed_threshold"] else self.style.ERROR("FAIL"))

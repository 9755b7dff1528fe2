"""What an evaluation run costs over its turns: a dataset of --cases one-turn cases run by evals.runner at
--concurrency, against the same turns admitted directly through engine.admission (a conversation each, the same
concurrency, each turn's task awaited), in one process on the scripted model.

    .venv/bin/python bench/eval_run.py [--cases 200] [--concurrency 4] [--tokens 20] [--delay 0.01]

The scripted server (llm.fake_server, a subprocess on 127.0.0.1) streams each reply as --tokens chunks --delay
seconds apart, so a turn is mostly waiting for its model as a real one is. The run's extra work per case is its
conversation, the expectations' check, the case's result row and the run's counters. Both paths run inside
async_to_sync, as the run's Celery task and manage.py eval_run do; a warm-up of --concurrency direct turns
(not counted), direct, then the run. It prints the time
per case of each and the ratio run/direct. Goal: <= 1.2.

Needs: `make install` only (a throwaway SQLite database without DATABASE_URL; the scripted model server is started
here). No data files, no services.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_parser, setup_django, smoke_check

GOAL = 1.2


def world(port: int, cases: int):
    """A tenant with an owner, a provider on the scripted server, a published agent and a dataset of `cases`."""
    from django.contrib.auth import get_user_model

    from agents.services import agent_create, agent_publish
    from evals.services import case_create, dataset_create
    from llm.models import ModelProvider
    from tenants.models import Membership, Role, Tenant
    from tenants.scope import tenant_scope

    tenant = Tenant.objects.create(slug=f"eval-bench-{time.time_ns()}", name="Eval bench",
                                   monthly_token_budget=10**12)  # fmt: skip
    user = get_user_model().objects.create_user(username=f"bench-{tenant.slug}", password="x")  # noqa: S106
    Membership.objects.create(tenant=tenant, user=user, role=Role.OWNER)
    with tenant_scope(tenant):
        provider = ModelProvider.objects.create(
            tenant=tenant, name="bench", base_url=f"http://127.0.0.1:{port}/v1", is_default=True, max_retries=0,
            chat_models=[{"name": "gpt-4", "context_window": 8192}], default_chat_model="gpt-4", timeout_seconds=30,
        )  # fmt: skip
        provider.set_api_key("bench-key")
        provider.save()
        agent = agent_create(tenant=tenant, name="Bench", system_prompt="You answer.", provider=provider,
                             model="gpt-4", token_overflow_config={"strategy": "none"})  # fmt: skip
        agent_publish(agent=agent, user=None)
        dataset = dataset_create(agent=agent, name="Bench")
        for n in range(cases):
            case_create(dataset=dataset, title=f"Case {n}", turns=[f"Question {n}"],
                        expectations=[{"kind": "not_contains", "text": "never-in-a-reply"}])  # fmt: skip
    return tenant, user, agent, dataset


async def direct(tenant, user, agent, cases: int, concurrency: int) -> tuple[float, int]:
    """The same turns admitted directly (an API key's caller: no per-minute rate), `concurrency` at once."""
    from agents.runtime import TurnStatus
    from agents.services import conversation_start
    from core.db import database_sync_to_async
    from engine.admission import Admitted, Caller, CallerKind, Target, admit
    from memory.models import ConversationSource
    from tenants.scope import tenant_scope

    caller = Caller(tenant=tenant, source=ConversationSource.API, kind=CallerKind.KEY, user=user)
    gate = asyncio.Semaphore(concurrency)
    completed = 0

    def start():
        with tenant_scope(tenant):
            return conversation_start(agent=agent, user=user, source=ConversationSource.API)

    async def one(n: int) -> None:
        nonlocal completed
        async with gate:
            conversation = await database_sync_to_async(start)()
            admitted = await admit(caller=caller, target=Target(conversation=conversation),
                                   content=f"Question {n}", client_id=f"direct-{n}")  # fmt: skip
            if isinstance(admitted, Admitted):
                result = await admitted.submission.task
                completed += result is not None and result.status == TurnStatus.COMPLETED

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(cases)))
    return time.perf_counter() - started, completed


def main() -> None:
    parser = bench_parser(__doc__, description="An evaluation run's time per case against its turns run directly.",
                          smoke="8 cases at concurrency 4, 5-token replies")  # fmt: skip
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.01, help="seconds between streamed chunks")
    args = parser.parse_args()
    if args.smoke:
        args.cases, args.tokens, args.delay = 8, 5, 0.001

    setup_django("bench-eval-")
    from asgiref.sync import async_to_sync

    from evals.models import RunStatus
    from evals.runner import execute, run_progress, run_start
    from llm.fake_server import spawn
    from tenants.scope import tenant_scope

    process, port = spawn({"rules": [{"when": {}, "reply": {"text_tokens": args.tokens, "delay": args.delay}}]})
    try:
        tenant, user, agent, dataset = world(port, args.cases)
        with tenant_scope(tenant):
            async_to_sync(direct)(tenant, user, agent, args.concurrency, args.concurrency)  # warm-up, not counted
            direct_seconds, completed = async_to_sync(direct)(tenant, user, agent, args.cases, args.concurrency)
            run = run_start(dataset=dataset, version=agent.published_version(), user=user,
                            concurrency=args.concurrency, queue=False)  # fmt: skip
            started = time.perf_counter()
            async_to_sync(execute)(run.pk, tenant.pk)
            run_seconds = time.perf_counter() - started
            progress = run_progress(run)
    finally:
        process.terminate()
        process.wait(timeout=5)

    per_direct, per_run = direct_seconds / args.cases * 1000, run_seconds / args.cases * 1000
    ratio = per_run / per_direct
    print(f"{args.cases} one-turn cases at concurrency {args.concurrency}, {args.tokens}-token replies, "
          f"{args.delay * 1000:g} ms between chunks")  # fmt: skip
    print(f"  direct (admit, await the turn): {per_direct:7.2f} ms per case   ({completed}/{args.cases} completed)")
    print(f"  evaluation run (evals.runner):  {per_run:7.2f} ms per case   ({progress['passed']}/{args.cases} passed, "
          f"status {progress['status']})")  # fmt: skip
    print(f"  ratio run/direct {ratio:.3f} (goal <= {GOAL})")
    print("  goal met" if ratio <= GOAL else "  goal NOT met")
    if args.smoke:
        smoke_check([
            f"direct: {completed}/{args.cases} turns completed" if completed != args.cases else "",
            f"run: {progress['status']}, {progress['passed']}/{args.cases} passed"
            if progress["status"] != RunStatus.DONE or progress["passed"] != args.cases else "",
        ])  # fmt: skip


if __name__ == "__main__":
    main()

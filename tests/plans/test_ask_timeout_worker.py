"""The ask-user timeout with a real Celery worker (seed 3): `celery -A config worker` runs as a subprocess on the
Redis broker and the test database; the plan asks, nobody answers, and after the countdown the worker resumes it
with the no-reply text. The test is transactional so that the worker sees its rows."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time

import pytest
from celery import current_app

from core.db import database_sync_to_async
from plans.models import LogKind, PlanLog
from tenants.scope import tenant_scope
from tests.plans.test_plan_gaps import ASKING_RULES, _scoped, _user_texts
from tests.plans.test_plans import _plan, setup  # noqa: F401  (fixture)
from tests.processes import ROOT, database_url, require_postgresql
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def celery_worker(redis_url, transactional_db, tmp_path):
    """A Celery worker (one solo process) on this test's Redis and database; always stopped afterwards."""
    require_postgresql("The worker test")
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "CELERY_TASK_ALWAYS_EAGER": "0",
    }
    command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo", "--loglevel=INFO", "--purge",
               "--without-gossip", "--without-mingle", "--without-heartbeat",
               "-n", f"plans-test-{os.getpid()}@%h"]  # fmt: skip
    with log.open("w") as out:
        worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "ready." not in log.read_text(errors="replace"):
            if worker.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"The Celery worker did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield log
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=10)


async def test_a_real_worker_resumes_the_plan_with_the_no_reply_text(
    tenant,
    setup,  # noqa: F811
    scripted_llm,
    settings,
    celery_worker,
):
    from plans.tasks import NO_REPLY

    settings.PLAN_ASK_TIMEOUT_SECONDS = 2
    scripted_llm.set_rules(*ASKING_RULES)
    conversation = await setup()
    current_app.conf.task_always_eager = False  # this process sends the countdown task to the broker
    try:
        _user, reply, _sink = await user_turn(tenant, conversation, "Do it")
    finally:
        current_app.conf.task_always_eager = True
    plan, _steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "interrupted" and reply.content == "Which city?"

    deadline = time.monotonic() + 60
    while plan.status not in ("completed", "failed") and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        plan, steps = await database_sync_to_async(_plan)(tenant)
    worker_log = celery_worker.read_text(errors="replace")
    assert plan.status == "completed", worker_log[-3000:]
    deadline = time.monotonic() + 60
    while "succeeded" not in worker_log and time.monotonic() < deadline:  # the task logs after its last write
        await asyncio.sleep(0.1)
        worker_log = celery_worker.read_text(errors="replace")
    assert plan.userQuery == NO_REPLY and steps[0].result["output"] == "no city, default"
    texts = await database_sync_to_async(lambda: _scoped(tenant, _user_texts, conversation))()
    assert texts == ["Do it", NO_REPLY]
    assert re.search(r"Task plans\.ask_timeout\[[^\]]+\] succeeded in [\d.]+s: True", worker_log), worker_log[-3000:]

    def where():
        with tenant_scope(tenant):
            return [row.data.get("where") for row in PlanLog.objects.filter(kind=LogKind.STATE)
                    if row.data.get("event") == "ask_timeout"]  # fmt: skip

    assert await database_sync_to_async(where)() == ["celery"]

"""The Celery worker killed (SIGKILL) while it writes a conversation's rolling summary, on the real services: a real
worker on the Redis broker and the test database, the summary request hanging in the scripted model when the kill
comes. Nothing is lost: the next turn answers at once with the strategy's window (the summary is still pending), the
summary is written by the worker that takes over, it is counted as retried, and every message is still there.

Two ways a worker dies: the whole worker (the solo pool: one process; the broker gives the message to a restarted
worker after the visibility timeout) and the pool process under a living worker (prefork, as scripts/serve runs it:
the worker puts the message back at once, `reject_on_worker_lost`)."""

from __future__ import annotations

import asyncio
import time

import pytest
from celery import current_app

from agents.services import conversation_start
from core.db import database_sync_to_async
from memory.models import ConversationContext, Message
from memory.overflow import SUMMARY_HEADING
from memory.selectors import overflow_metrics_for_agent
from memory.services import message_add
from tenants.scope import tenant_scope
from tests.processes import celery_workers, require_postgresql
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)

VISIBILITY_TIMEOUT = 2
SUMMARY = "The user asked about panels in Hangzhou and a 10 kW inverter."
RULES = (
    # The first summary request hangs: the worker is killed while it waits for it.
    {"name": "hang", "when": {"system_prompt": "running summary"}, "times": 1, "reply": {"stall": 120, "text": "late"}},
    {"name": "summary", "when": {"system_prompt": "running summary"}, "reply": {"text": SUMMARY}},
    {"name": "chat", "when": {}, "reply": {"text": "Noted: {last_message}"}},
)


def _conversation(tenant, agent, user):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=agent, user=user)
        for number in range(6):
            role = "user" if number % 2 == 0 else "assistant"
            message_add(conversation=conversation, role=role, content=f"{role} message {number}")
        return conversation


def _state(tenant, conversation, agent_id):
    with tenant_scope(tenant):
        context = ConversationContext.objects.get(conversation=conversation)
        messages = [(m.role, m.content) for m in Message.objects.filter(conversation=conversation).order_by("id")]
        return context, messages, overflow_metrics_for_agent(agent_id=agent_id)


def _chat_requests(scripted_llm) -> list[list[dict]]:
    requests = [r["body"]["messages"] for r in scripted_llm.requests()]
    return [messages for messages in requests if "running summary" not in messages[0]["content"]]


async def _until(predicate, timeout: float, what: str, log=None):
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout} s" + (f":\n{log()}" if log else ""))
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("killed", ["worker", "pool process"])
async def test_a_summary_whose_worker_is_killed_is_retried_and_nothing_is_lost(
    killed, tenant, member, make_agent, scripted_provider, scripted_llm, redis_url, tmp_path
):
    require_postgresql("The worker test")
    scripted_llm.set_rules(*RULES)
    agent = await database_sync_to_async(make_agent)(strategy="summarize", max_tokens=100_000, summary_threshold=4)
    conversation = await database_sync_to_async(_conversation)(tenant, agent, member)
    env = {"CELERY_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT), "LLM_RETRY_BASE_DELAY": "0.01"}
    pool = "solo" if killed == "worker" else "prefork"
    with celery_workers(redis_url=redis_url, log_dir=tmp_path, env=env) as workers:
        worker = await asyncio.to_thread(workers.start, pool=pool)
        current_app.conf.task_always_eager = False  # this process sends the summary task to the broker
        try:
            # Turn 1 marks the three oldest messages for the summary and queues it; the worker takes it and hangs.
            await user_turn(tenant, conversation, "What about the inverter?")

            async def summary_requested():
                return [r for r in scripted_llm.requests() if "running summary" in r["body"]["messages"][0]["content"]]

            await _until(summary_requested, 60, "the summary request", worker.output)
            context, _messages, _metrics = await database_sync_to_async(_state)(tenant, conversation, agent.pk)
            assert context.summary_pending and context.summary == ""
            marked = context.active_messages[:3]

            if killed == "worker":
                worker.kill()
                killed_at = time.monotonic()
            else:
                (pool_process,) = worker.pool_processes()
                await asyncio.to_thread(_sigkill, pool_process)

            # Turn 2 right away: it answers, sending the window (the marked messages stay out; no summary yet).
            _user, reply, _sink = await user_turn(tenant, conversation, "And the battery?")
            assert reply.status == "complete" and reply.content == "Noted: And the battery?"
            if killed == "worker":  # no worker is running: the summary is certainly still pending
                sent = _chat_requests(scripted_llm)[-1]
                assert SUMMARY_HEADING not in sent[0]["content"]
                assert not any(m["content"] == "user message 0" for m in sent[1:])
                assert sent[-1] == {"role": "user", "content": "And the battery?"}
                await asyncio.sleep(max(0.0, killed_at + VISIBILITY_TIMEOUT + 0.5 - time.monotonic()))
                worker = await asyncio.to_thread(workers.start, pool=pool)  # the restarted worker

            async def summarised():
                context, _messages, _metrics = await database_sync_to_async(_state)(tenant, conversation, agent.pk)
                return context.summary == SUMMARY and not context.summary_pending

            await _until(summarised, 60, "the retried summary", worker.output)
            context, messages, metrics = await database_sync_to_async(_state)(tenant, conversation, agent.pk)
            assert not set(marked) & set(context.active_messages)  # summarised, out of the context
            assert metrics["summaries_retried"] == 1 and metrics["summaries_made"] == 1
            assert metrics["summaries_failed"] == 0 and metrics["triggers"] >= 2

            # Turn 3 sends the summary in the one system message.
            _user, reply, _sink = await user_turn(tenant, conversation, "Thanks")
            assert reply.status == "complete"
            sent = _chat_requests(scripted_llm)[-1]
            assert [m["role"] for m in sent].count("system") == 1 and SUMMARY in sent[0]["content"]
        finally:
            current_app.conf.task_always_eager = True
        await asyncio.to_thread(workers.stop_all)  # the summary turn 3 queued ends before the database is flushed

    _context, messages, _metrics = await database_sync_to_async(_state)(tenant, conversation, agent.pk)
    seeded = [("user" if n % 2 == 0 else "assistant", f"{'user' if n % 2 == 0 else 'assistant'} message {n}")
              for n in range(6)]  # fmt: skip
    asked = ["What about the inverter?", "And the battery?", "Thanks"]
    assert messages == seeded + [pair for text in asked for pair in (("user", text), ("assistant", f"Noted: {text}"))]


def _sigkill(pid: int) -> None:
    import os
    import signal

    os.kill(pid, signal.SIGKILL)

"""Plans: a failing step, concurrency, the O1 logs, against the scripted OpenAI-compatible server."""

import asyncio

import pytest

from agents.tools import ToolResult, python_tool
from core.db import database_sync_to_async
from plans.models import LogKind, PlanLog
from tenants.scope import tenant_scope
from tests.plans.test_plans import _plan, call, setup  # noqa: F401  (fixture)
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)


def _retries(tenant, count):
    from llm.models import ModelProvider

    with tenant_scope(tenant):
        ModelProvider.objects.update(max_retries=count)


def _parallel_plan(allow):
    steps = [
        {"seqNo": 1, "agentName": "Finder", "requirement": "find"},
        {"seqNo": 2, "agentName": "Writer", "requirement": "write"},
    ]
    return call("create_plan", {"name": "Two", "steps": steps, "allow_concurrency": allow})


async def test_a_failing_step_fails_the_plan_and_the_reply_says_which_and_why(tenant, setup, scripted_llm):  # noqa: F811
    scripted_llm.set_rules(
        {
            "when": {"has_tool_results": False, "system_prompt": "PLANNER"},
            "reply": {"tool_calls": [_parallel_plan(False)]},
        },
        {"when": {"system_prompt": "AGENT Finder"}, "reply": {"error": {"status": 500, "message": "boom"}}},
        {"when": {}, "reply": {"text": "Summary."}},
    )
    conversation = await setup()
    await database_sync_to_async(_retries)(tenant, 1)
    _user, reply, sink = await user_turn(tenant, conversation, "Do it")
    plan, steps = await database_sync_to_async(_plan)(tenant)
    finder = [
        r for r in await asyncio.to_thread(scripted_llm.requests) if "AGENT Finder" in str(r["body"]["messages"][0])
    ]
    assert len(finder) == 2  # the first try and one retry, then the step gives up
    assert plan.status == "failed"
    assert [s.status for s in steps] == ["failed", "not_started"]
    assert reply.content.startswith("Step 1 (Finder) failed: ")
    assert steps[0].result["output"] in reply.content and steps[0].result["output"]
    assert sink.of("plan")[-1]["plan"]["status"] == "failed"


def _step_times(tenant):
    """(seqNo -> (started, ended)) from the PlanLog state rows."""
    with tenant_scope(tenant):
        rows = list(PlanLog.objects.filter(kind=LogKind.STATE, step__isnull=False).order_by("id"))
    times = {}
    for row in rows:
        if row.data.get("status") == "in_progress":
            times.setdefault(row.step, [row.created_at, None])
        elif row.data.get("status") == "completed":
            times[row.step][1] = row.created_at
    return times


def _concurrent_rules(scripted_llm, allow):
    scripted_llm.set_rules(
        {
            "when": {"has_tool_results": False, "system_prompt": "PLANNER"},
            "reply": {"tool_calls": [_parallel_plan(allow)]},
        },
        {"when": {"system_prompt": "AGENT Finder"}, "reply": {"text": "found it", "first_delay": 0.6}},
        {"when": {"system_prompt": "AGENT Writer"}, "reply": {"text": "written", "first_delay": 0.6}},
        {"when": {}, "reply": {"text": "All done."}},
    )


def _assert_ordered_per_index(sink):
    for seq in (1, 2):
        started = next(
            f["seq"]
            for f in sink.of("plan")
            if any(s["seqNo"] == seq and s["status"] == "in_progress" for s in f["plan"]["steps"])
        )
        last_step = max(f["seq"] for f in sink.of("step"))  # after it: the final reply (the turn's index, 0)
        mine = [
            f
            for f in sink.frames
            if f["type"] in ("delta", "tool", "step") and f.get("index") == seq and f["seq"] <= last_step
        ]
        assert mine and all(f["seq"] > started for f in mine)
        deltas = [f["seq"] for f in mine if f["type"] == "delta"]
        assert deltas == sorted(deltas) and "".join(f["content"] for f in mine if f["type"] == "delta")
        assert mine[-1]["type"] == "step"


async def test_independent_steps_run_concurrently_when_allowed(tenant, setup, scripted_llm):  # noqa: F811
    _concurrent_rules(scripted_llm, True)
    conversation = await setup()
    _user, _reply, sink = await user_turn(tenant, conversation, "Do it")
    plan, _steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "completed" and plan.allow_concurrency
    times = await database_sync_to_async(_step_times)(tenant)
    assert times[2][0] < times[1][1] and times[1][0] < times[2][1]  # the two steps overlap
    _assert_ordered_per_index(sink)


async def test_steps_run_one_after_another_without_concurrency(tenant, setup, scripted_llm):  # noqa: F811
    _concurrent_rules(scripted_llm, False)
    conversation = await setup()
    _user, _reply, sink = await user_turn(tenant, conversation, "Do it")
    plan, _steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "completed" and not plan.allow_concurrency
    times = await database_sync_to_async(_step_times)(tenant)
    assert times[1][1] <= times[2][0]
    _assert_ordered_per_index(sink)


@python_tool(
    name="pg_echo",
    description_en="Echoes a word.",
    parameters={"type": "object", "properties": {"word": {"type": "string"}}},
)
def pg_echo(word: str = ""):
    return ToolResult(content=f"echo {word}")


def _use_echo(tenant):
    from agents.models import Agent
    from agents.services import agent_publish, agent_update

    with tenant_scope(tenant):
        agent_publish(agent=agent_update(agent=Agent.objects.get(name="Finder"), tools=["pg_echo"]), user=None)


def _logs(tenant):
    with tenant_scope(tenant):
        return list(PlanLog.objects.order_by("id").values("kind", "step", "data"))


async def test_step_tool_calls_model_calls_and_plan_states_are_logged(tenant, setup, scripted_llm):  # noqa: F811
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False, "system_prompt": "PLANNER"},
         "reply": {"tool_calls": [_parallel_plan(False)]}},
        {"when": {"system_prompt": "AGENT Finder", "has_tool_results": False},
         "reply": {"tool_calls": [call("pg_echo", {"word": "sun"})]}},
        {"when": {}, "reply": {"text": "done"}},
    )  # fmt: skip
    conversation = await setup()
    await database_sync_to_async(_use_echo)(tenant)
    await user_turn(tenant, conversation, "Do it")
    logs = await database_sync_to_async(_logs)(tenant)
    tools = [row for row in logs if row["kind"] == LogKind.TOOL_CALL]
    assert len(tools) == 1 and tools[0]["step"] == 1
    assert tools[0]["data"]["name"] == "pg_echo" and tools[0]["data"]["arguments"] == {"word": "sun"}
    assert "echo sun" in tools[0]["data"]["result"]
    steps_called = {
        row["step"] for row in logs if row["kind"] == LogKind.MODEL_CALL and row["data"].get("role") == "step"
    }
    assert steps_called == {1, 2}
    for seq in (1, 2):
        events = [row["data"]["event"] for row in logs if row["step"] == seq and "event" in row["data"]]
        assert events == ["before_step", "after_step"]
    after = next(row["data"]["plan"] for row in logs if row["step"] == 1 and row["data"].get("event") == "after_step")
    assert after["steps"][0]["status"] == "completed" and after["steps"][1]["status"] == "not_started"


def _user_texts(conversation):
    from memory.models import Message

    return list(Message.objects.filter(conversation=conversation, role="user").values_list("content", flat=True))


ASKING_RULES = (
    {"when": {"has_tool_results": False, "system_prompt": "PLANNER"}, "reply": {"tool_calls": [_parallel_plan(False)]}},
    {"when": {"system_prompt": "AGENT Finder", "last_message": "not replied"}, "reply": {"text": "no city, default"}},
    {"when": {"system_prompt": "AGENT Finder", "last_message": "Paris"}, "reply": {"text": "Paris it is"}},
    {"when": {"system_prompt": "AGENT Finder"}, "reply": {"tool_calls": [call("pl_ask", {})]}},
    {"when": {}, "reply": {"text": "done"}},
)


async def _wait_for(function, predicate, seconds):
    """Poll `function` (sync, run in a thread) until `predicate(result)` or the time is up; the last result."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        result = await database_sync_to_async(function)()
        if predicate(result) or loop.time() > deadline:
            return result
        await asyncio.sleep(0.1)


async def test_in_eager_mode_the_ask_timeout_runs_on_a_timer_of_the_process(tenant, setup, scripted_llm, settings):  # noqa: F811
    from celery import current_app

    from plans.tasks import NO_REPLY

    assert current_app.conf.task_always_eager  # the tests' (and the embedded default's) mode
    settings.PLAN_ASK_TIMEOUT_SECONDS = 1
    scripted_llm.set_rules(*ASKING_RULES)
    conversation = await setup()
    _user, reply, _sink = await user_turn(tenant, conversation, "Do it")
    plan, _steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "interrupted" and reply.content == "Which city?"
    plan, steps = await _wait_for(lambda: _plan(tenant), lambda found: found[0].status in ("completed", "failed"), 15)
    assert plan.status == "completed" and plan.userQuery == NO_REPLY
    assert steps[0].result["output"] == "no city, default"
    texts = await database_sync_to_async(lambda: _scoped(tenant, _user_texts, conversation))()
    assert texts == ["Do it", NO_REPLY]
    logs = await database_sync_to_async(_logs)(tenant)
    assert {"event": "ask_timeout", "where": "process", "seconds": 1.0} in [row["data"] for row in logs]


async def test_an_answer_before_the_timeout_cancels_it(tenant, setup, scripted_llm, settings):  # noqa: F811
    from plans import tasks

    settings.PLAN_ASK_TIMEOUT_SECONDS = 1.5
    scripted_llm.set_rules(*ASKING_RULES)
    conversation = await setup()
    await user_turn(tenant, conversation, "Do it")
    plan, _steps = await database_sync_to_async(_plan)(tenant)
    assert plan.pk in tasks.ask_timer
    await user_turn(tenant, conversation, "Paris")
    assert plan.pk not in tasks.ask_timer
    await asyncio.sleep(2)  # past the countdown: nothing more happens
    plan, steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "completed" and plan.userQuery == "Paris" and steps[0].result["output"] == "Paris it is"
    texts = await database_sync_to_async(lambda: _scoped(tenant, _user_texts, conversation))()
    assert texts == ["Do it", "Paris"]


def _scoped(tenant, function, *args):
    with tenant_scope(tenant):
        return function(*args)

"""Plans: the planner kind, the executor, interrupt and resume, against the scripted OpenAI-compatible server."""

import asyncio
import json

import pytest

from agents.models import Agent
from agents.services import agent_create, agent_publish, agent_update, conversation_start
from agents.tools import ToolResult, python_tool
from core.db import database_sync_to_async
from memory.models import Conversation
from plans.models import Plan, PlanStep
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)


@python_tool(name="pl_ask", description_en="Asks the user.", parameters={"type": "object", "properties": {}})
def pl_ask():
    return ToolResult(content="asked", ask_user="Which city?")


def call(name, arguments):
    return {"name": name, "arguments": arguments}


@pytest.fixture
def setup(tenant, member, scripted_llm):
    def _make():
        with tenant_scope(tenant):
            ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True,
                                 max_retries=0)  # fmt: skip
            planner = agent_create(tenant=tenant, name="Planner", system_prompt="PLANNER", kind="planner",
                                   token_overflow_config={"strategy": "none"})  # fmt: skip
            agent_publish(agent=planner, user=None)
            for name in ("Finder", "Writer"):
                agent = agent_create(tenant=tenant, name=name, system_prompt=f"AGENT {name}", description=name,
                                     token_overflow_config={"strategy": "none"}, tools=["pl_ask"])  # fmt: skip
                agent_publish(agent=agent, user=None)  # the planner offers published agents only
            return conversation_start(agent=planner, user=member)

    return database_sync_to_async(_make)


def _plan(tenant):
    with tenant_scope(tenant):
        plan = Plan.objects.get()
        return plan, list(PlanStep.objects.filter(plan=plan).order_by("seqNo"))


PLAN = call(
    "create_plan",
    {"name": "Two steps", "steps": [
        {"seqNo": 2, "agentName": "Writer", "requirement": "write", "depends_on": [1]},
        {"seqNo": 1, "agentName": "Finder", "requirement": "find"},
    ]},
)  # fmt: skip


async def _bodies(scripted_llm):
    return [r["body"] for r in await asyncio.to_thread(scripted_llm.requests)]


def _system(body):
    return body["messages"][0]["content"]


async def test_a_valid_plan_runs_in_dependency_order(tenant, setup, scripted_llm):
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False, "system_prompt": "PLANNER"}, "reply": {"tool_calls": [PLAN]}},
        {"when": {"system_prompt": "AGENT Finder"}, "reply": {"text": "found it"}},
        {"when": {"system_prompt": "AGENT Writer"}, "reply": {"text": "written"}},
        {"when": {}, "reply": {"text": "All done."}},
    )
    conversation = await setup()
    _user, reply, sink = await user_turn(tenant, conversation, "Do it")
    plan, steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "completed" and [s.status for s in steps] == ["completed", "completed"]
    assert [f["index"] for f in sink.of("step")] == [1, 2, 0]  # the steps, then the plan turn's own
    assert steps[1].result["status"] == "completed" and steps[0].result["output"] == "found it"
    assert sink.of("plan")[-1]["plan"]["status"] == "completed"
    bodies = await _bodies(scripted_llm)
    writer = next(b for b in bodies if "AGENT Writer" in _system(b))
    assert '"found it"' in writer["messages"][-1]["content"]
    assert reply.content == "All done."
    # Index 0 is the plan's own: its plan frames and the final reply; a step's frames carry its seqNo (>= 1).
    assert {f["type"] for f in sink.frames if f["index"] == 0} == {"plan", "delta", "step", "done"}
    last_step = max(f["seq"] for f in sink.of("step") if f["index"] > 0)
    assert all(f["seq"] > last_step for f in sink.frames if f["index"] == 0 and f["type"] != "plan")
    assert {f["index"] for f in sink.frames if f["type"] in ("delta", "step") and f["seq"] < last_step} == {1, 2}
    # The planner's and the finalizer's model calls are the reply's usage (no more "0 + 0" under a plan's reply).
    done = sink.of("done")[-1]
    assert done["usage"]["prompt_tokens"] > 0 and done["usage"]["completion_tokens"] > 0
    assert sink.result.status == "completed" and sink.result.usage.prompt_tokens == done["usage"]["prompt_tokens"]


def test_steps_are_numbered_from_1(tenant):
    from plans.services import plan_problems

    with tenant_scope(tenant):
        agent_publish(agent=agent_create(tenant=tenant, name="A"), user=None)
        steps = [{"seqNo": 0, "agentName": "A", "requirement": "r"}, {"seqNo": 1, "agentName": "A", "requirement": "r"}]
        assert plan_problems(tenant=tenant, steps=steps) == [
            "Step 0: number the steps from 1 (index 0 is the plan's own reply in the stream)."
        ]


async def test_an_invalid_plan_goes_back_and_then_fails_clearly(tenant, setup, scripted_llm):
    bad = call("create_plan", {"name": "x", "steps": [{"seqNo": 1, "agentName": "Ghost", "requirement": "r"}]})
    scripted_llm.set_rules({"when": {}, "reply": {"tool_calls": [bad]}})
    conversation = await setup()
    _user, reply, _sink = await user_turn(tenant, conversation, "Do it")
    bodies = await _bodies(scripted_llm)
    assert len(bodies) == 3
    assert "Ghost does not exist" in bodies[1]["messages"][-1]["content"]
    assert "could not make a valid plan" in reply.content


def test_a_cycle_is_a_problem(tenant):
    from plans.services import plan_problems

    with tenant_scope(tenant):
        agent_publish(agent=agent_create(tenant=tenant, name="A"), user=None)
        steps = [{"seqNo": 1, "agentName": "A", "requirement": "r", "depends_on": [2]},
                 {"seqNo": 2, "agentName": "A", "requirement": "r", "depends_on": [1]}]  # fmt: skip
        assert plan_problems(tenant=tenant, steps=steps) == ["The steps' dependencies form a cycle."]


async def test_interrupt_and_resume_runs_completed_steps_once(tenant, setup, scripted_llm):
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False, "system_prompt": "PLANNER"}, "reply": {"tool_calls": [PLAN]}},
        {"when": {"system_prompt": "AGENT Finder"}, "reply": {"text": "found it"}},
        {"when": {"system_prompt": "AGENT Writer", "last_message": "Paris"}, "reply": {"text": "written for Paris"}},
        {"when": {"system_prompt": "AGENT Writer"}, "reply": {"tool_calls": [call("pl_ask", {})]}},
        {"when": {}, "reply": {"text": "All done."}},
    )
    conversation = await setup()
    _user, reply, _sink = await user_turn(tenant, conversation, "Do it")
    plan, steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "interrupted" and [s.status for s in steps] == ["completed", "interrupted"]
    assert reply.content == "Which city?"
    _user, reply, _sink = await user_turn(tenant, conversation, "Paris")
    plan, steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "completed" and plan.userQuery == "Paris"
    bodies = await _bodies(scripted_llm)
    assert sum("AGENT Finder" in _system(b) for b in bodies) == 1
    assert steps[1].result["output"] == "written for Paris"


async def _plan_waiting_for_the_writer(tenant, setup, scripted_llm):
    """A plan whose Writer step asked the user (the answer "not replied" makes it write a default)."""
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False, "system_prompt": "PLANNER"}, "reply": {"tool_calls": [PLAN]}},
        {"when": {"system_prompt": "AGENT Finder"}, "reply": {"text": "found it"}},
        {"when": {"system_prompt": "AGENT Writer", "last_message": "not replied"}, "reply": {"text": "default"}},
        {"when": {"system_prompt": "AGENT Writer"}, "reply": {"tool_calls": [call("pl_ask", {})]}},
        {"when": {}, "reply": {"text": "All done."}},
    )
    conversation = await setup()
    await user_turn(tenant, conversation, "Do it")
    plan, _steps = await database_sync_to_async(_plan)(tenant)
    return conversation, plan


async def test_the_ask_timeout_resumes_with_the_no_reply_text(tenant, setup, scripted_llm):
    from plans.tasks import NO_REPLY, plan_ask_timeout

    _conversation, plan = await _plan_waiting_for_the_writer(tenant, setup, scripted_llm)
    assert await asyncio.to_thread(plan_ask_timeout, plan.pk) is True
    plan, _steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "completed" and plan.userQuery == NO_REPLY


async def test_step_agents_run_on_the_execution_tier(tenant, setup, scripted_llm):
    from llm.models import ModelProvider

    scripted_llm.set_rules(
        {"when": {"has_tool_results": False, "system_prompt": "PLANNER"}, "reply": {"tool_calls": [PLAN]}},
        {"when": {"system_prompt": "AGENT"}, "reply": {"text": "done"}},
        {"when": {}, "reply": {"text": "All done."}},
    )
    conversation = await setup()

    def tiers():
        with tenant_scope(tenant):
            ModelProvider.objects.filter(name="scripted").update(
                planning_model="plan-model", execution_model="exec-model"
            )

    await database_sync_to_async(tiers)()
    await user_turn(tenant, conversation, "Do it")
    models = {(_system(body).split()[0], body["model"]) for body in await _bodies(scripted_llm)}
    assert ("AGENT", "exec-model") in models
    assert not any(model == "exec-model" for prompt, model in models if prompt != "AGENT")


async def test_the_ask_timeout_streams_its_turn_and_yields_to_a_running_user_turn(tenant, setup, scripted_llm):
    from engine.streams import get_frame_log
    from plans.tasks import NO_REPLY, plan_ask_timeout

    conversation, plan = await _plan_waiting_for_the_writer(tenant, setup, scripted_llm)
    log = get_frame_log()

    # The user's answer is being handled (its turn holds the conversation): the timeout leaves the plan alone.
    assert await log.claim_turn(conversation.pk, 10**9) is None
    assert await asyncio.to_thread(plan_ask_timeout, plan.pk) is False
    plan, _steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "interrupted"
    await log.release_turn(conversation.pk, 10**9)

    # Otherwise it runs as a turn of the conversation: its frames reach the frame log an open page reads.
    assert await asyncio.to_thread(plan_ask_timeout, plan.pk) is True
    plan, _steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "completed" and plan.userQuery == NO_REPLY
    logged = [entry.as_dict() for entry in await log.after(conversation.pk, 0)]
    echoed = [frame for frame in logged if frame["type"] == "user_message"]
    assert echoed[-1]["content"] == NO_REPLY
    assert logged[-1]["type"] == "done" and await log.running_turn(conversation.pk) is None


def _drafts(tenant):
    """An agent saved and never published, and a published agent's edits saved as a draft."""
    with tenant_scope(tenant):
        agent_create(tenant=tenant, name="Drafty", system_prompt="AGENT Drafty", description="Drafty",
                     token_overflow_config={"strategy": "none"})  # fmt: skip
        agent_update(agent=Agent.objects.get(name="Finder"), description="Draft description")


def _drafty_conversations(tenant):
    with tenant_scope(tenant):
        return Plan.objects.count(), Conversation.objects.filter(agent__name="Drafty").count()


async def test_a_draft_never_reaches_the_planner_even_when_its_model_names_it(tenant, setup, scripted_llm):
    """Issue 18: the planner's agent list is the published agents as published (a draft was listed, and a draft's
    edits were); a plan naming a draft goes back as invalid and never runs it."""
    conversation = await setup()
    await database_sync_to_async(_drafts)(tenant)
    named = call("create_plan", {"name": "x", "steps": [{"seqNo": 1, "agentName": "Drafty", "requirement": "r"}]})
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False, "system_prompt": "PLANNER"},
         "reply": {"tool_calls": [call("list_agents", {})]}},
        {"when": {"system_prompt": "PLANNER"}, "reply": {"tool_calls": [named]}},
    )  # fmt: skip
    _user, reply, _sink = await user_turn(tenant, conversation, "Do it")
    bodies = await _bodies(scripted_llm)
    listed = json.loads(bodies[1]["messages"][-1]["content"])
    assert listed == [{"agentName": name, "description": name} for name in ("Finder", "Writer")]
    assert "agent Drafty does not exist, is not active or is not published" in bodies[2]["messages"][-1]["content"]
    assert len(bodies) == 4 and "could not make a valid plan" in reply.content
    assert await database_sync_to_async(_drafty_conversations)(tenant) == (0, 0)

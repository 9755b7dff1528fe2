"""One model-call seam (agents.modelcall.AgentModel) for every kind of turn, and one ending for every turn runner.

Every model call of an agent goes through the seam, which fills the request from the agent's configuration: the chat
and ReAct tool loop, a tool that asks another model (deep_think), a workflow's llm step, the planner and its
finalizer, the plan's step agents and a goal run. The agent's longest reply (`max_reply_tokens`) reaches each call of a
chat, ReAct or workflow agent; a planner's and a goal agent's own calls are not bounded (docs/api.md says why).

Every registered turn runner ends the same way: a raise is one error frame, a stop ends the turn `stopped`, a cancel
keeps the partial reply.
"""

from __future__ import annotations

import ast
import asyncio
from dataclasses import dataclass

import pytest
from asgiref.sync import async_to_sync

from agents import frames, runtime
from agents.goal.loop import advance_run
from agents.goal.services import goal_run_start
from agents.modelcall import UNCAPPED_KINDS, AgentModel
from agents.models import AgentKind
from agents.runtime import run_turn
from agents.services import agent_create, agent_publish, conversation_start
from agents.tools import ToolResult, python_tool
from agents.workflows.services import workflow_save
from core.db import database_sync_to_async
from llm.models import LLMCall, Purpose
from llm.options import ChatRequest
from memory.models import Message, MessageStatus
from memory.services import message_add
from tenants.scope import tenant_scope
from tests.agents.factories import THINKER_WORKFLOW
from tests.llm.factories import ModelProviderFactory
from tests.sources import ROOT, parsed_sources
from tests.turns import Collector, flush_records, user_turn

pytestmark = pytest.mark.django_db(transaction=True)

REASONING = "deep-r1"
PLANNING = "m2-plan"
EXECUTION = "m1-exec"
LONG = {"text_tokens": 60}
WORKFLOW = THINKER_WORKFLOW


@python_tool(name="seam_clock", description_en="The time of day.", parameters={"type": "object", "properties": {}})
def seam_clock() -> ToolResult:
    return ToolResult(content="It is noon.")


@dataclass(frozen=True)
class Sent:
    """A request as the seam filled it."""

    agent_id: int | None
    purpose: str
    model: str
    max_tokens: int | None


@pytest.fixture
def seam(monkeypatch):
    """What went through the seam, in order."""
    sent: list[Sent] = []
    fill = AgentModel.request

    def spied(self, request):
        filled = fill(self, request)
        sent.append(Sent(self.agent_id, self.purpose, self.model, filled.max_tokens))
        return filled

    monkeypatch.setattr(AgentModel, "request", spied)
    return sent


@pytest.fixture
def provider(tenant, scripted_llm):
    with tenant_scope(tenant):
        return ModelProviderFactory(
            tenant=tenant,
            name="scripted",
            base_url=scripted_llm.base_url,
            is_default=True,
            max_retries=0,
            reasoning_model=REASONING,
            planning_model=PLANNING,
            execution_model=EXECUTION,
        )


def _agent(tenant, name, *, kind=AgentKind.CHAT, cap=None, publish=True, **fields):
    fields.setdefault("token_overflow_config", {"strategy": "none"})
    fields.setdefault("model", "gpt-4")
    agent = agent_create(tenant=tenant, name=name, kind=kind, max_reply_tokens=cap, **fields)
    if kind == AgentKind.WORKFLOW:
        workflow_save(tenant=tenant, yaml_text=WORKFLOW, agent=agent)
    if publish:
        agent_publish(agent=agent, user=None)
    return agent


@pytest.fixture
def conversation_of(tenant, member, provider):
    """A conversation with a new agent of `kind` (a published version, its longest reply `cap`)."""

    def make(kind=AgentKind.CHAT, cap=None, **fields):
        with tenant_scope(tenant):
            name = fields.pop("name", f"{kind} agent")
            return conversation_start(agent=_agent(tenant, name, kind=kind, cap=cap, **fields), user=member)

    return database_sync_to_async(make)


async def _bodies(scripted_llm) -> list[dict]:
    return [request["body"] for request in await asyncio.to_thread(scripted_llm.requests)]


def _calls(tenant):
    with tenant_scope(tenant):
        return list(LLMCall.objects.order_by("pk").values_list("agent_id", "conversation_id", "purpose", "model"))


def _went_through_the_seam(bodies, sent):
    """Each request the model received is one the seam filled, with the max_tokens the seam set."""
    assert [(body["model"], body.get("max_tokens")) for body in bodies] == [(s.model, s.max_tokens) for s in sent]


# --- the request and the seam -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cap", "asked", "sent"),
    [(None, None, None), (None, 50, 50), (8, None, 8), (8, 50, 8), (8, 3, 3), (8, 8, 8)],
)
def test_the_seam_sends_what_a_request_asks_within_the_agents_cap(tenant, cap, asked, sent):
    model = AgentModel(tenant=tenant, provider=None, model="gpt-4", temperature=0.4, reply_cap=cap)
    request = model.request(ChatRequest(messages=(), max_tokens=asked))
    assert request.max_tokens == sent and request.temperature == 0.4
    assert model.request(ChatRequest(messages=(), temperature=0.0)).temperature == 0.0  # the request's own wins
    assert model.on(None, "other").request(ChatRequest(messages=())).temperature is None  # a tier's model


def test_the_request_sends_only_what_is_set():
    request = ChatRequest(
        messages=[],
        tools=[{"type": "function", "function": {"name": "f"}}],
        tool_choice="auto",
        stop=["x"],
        seed=0,
        extra_body={"top_k": 3},
    )
    assert request.wire_params() == {
        "messages": [],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": "auto",
        "seed": 0,
        "stop": ["x"],
        "extra_body": {"top_k": 3},
    }
    assert ChatRequest(messages=[], tool_choice="required").wire_params() == {"messages": []}  # no tools, no choice
    assert isinstance(request.messages, tuple) and isinstance(request.tools, tuple)


def test_only_the_seam_calls_the_model_for_an_agent():
    """No module above memory imports llm.client's calls but agents.modelcall (memory's calls, a conversation's
    summary and long-term memory, are below the agents and name no turn)."""
    allowed = {ROOT / "agents" / "modelcall.py"}
    below = {ROOT / "llm", ROOT / "memory", ROOT / "knowledge", ROOT / "toolservers", ROOT / "tenants", ROOT / "core"}
    found = []
    for path, tree in parsed_sources():
        if path in allowed or any(base in path.parents for base in below):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "llm.client":
                names = {alias.name for alias in node.names} & {"stream_chat", "complete_chat"}
                found += [f"{path.relative_to(ROOT)}: {name}" for name in sorted(names)]
    assert found == []


# --- every kind of turn sends the longest reply through the seam ------------------------------------------------


@pytest.mark.parametrize("kind", [AgentKind.CHAT, AgentKind.REACT])
async def test_each_call_of_a_chat_or_react_turn_carries_the_cap(tenant, conversation_of, scripted_llm, seam, kind):
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False}, "reply": {"tool_calls": [{"name": "seam_clock", "arguments": {}}]}},
        {"when": {}, "reply": LONG},
    )
    conversation = await conversation_of(kind, cap=7, tools=["seam_clock"])
    await user_turn(tenant, conversation, "What time is it?")
    bodies = await _bodies(scripted_llm)
    assert [body.get("max_tokens") for body in bodies] == [7, 7]
    _went_through_the_seam(bodies, seam)
    assert {(s.agent_id, s.purpose) for s in seam} == {(conversation.agent_id, Purpose.CHAT)}


async def test_deep_think_in_a_turn_asks_the_reasoning_model_within_the_agents_cap(
    tenant, conversation_of, scripted_llm, seam
):
    scripted_llm.set_rules(
        {"when": {"model": REASONING}, "reply": {"text": "3 × 4 = 12.\n结论/Conclusion: 12"}},
        {
            "when": {"has_tool_results": False},
            "reply": {"tool_calls": [{"name": "deep_think", "arguments": {"question": "3 × 4?"}}]},
        },
        {"when": {}, "reply": {"text": "It is 12."}},
    )
    conversation = await conversation_of(cap=40, tools=["deep_think"])
    _user, reply, _sink = await user_turn(tenant, conversation, "3 × 4?")
    bodies = await _bodies(scripted_llm)
    assert [(body["model"], body.get("max_tokens")) for body in bodies] == [
        ("gpt-4", 40),
        (REASONING, 40),
        ("gpt-4", 40),
    ]
    assert reply.content == "It is 12."
    _went_through_the_seam(bodies, seam)
    calls = await database_sync_to_async(_calls)(tenant)
    assert [call for call in calls if call[3] == REASONING] == [
        (conversation.agent_id, conversation.pk, Purpose.EXTRACT, REASONING)
    ]


async def test_a_workflow_agents_llm_step_carries_the_cap(tenant, conversation_of, scripted_llm, seam):
    scripted_llm.set_rules({"when": {}, "reply": LONG})
    conversation = await conversation_of(AgentKind.WORKFLOW, cap=9)
    await user_turn(tenant, conversation, "rain")
    bodies = await _bodies(scripted_llm)
    assert [body.get("max_tokens") for body in bodies] == [9]
    _went_through_the_seam(bodies, seam)
    assert [(s.agent_id, s.purpose) for s in seam] == [(conversation.agent_id, Purpose.CHAT)]


PLAN = {
    "name": "create_plan",
    "arguments": {
        "name": "Two steps",
        "steps": [
            {"seqNo": 1, "agentName": "Finder", "requirement": "find"},
            {"seqNo": 2, "agentName": "Writer", "requirement": "write", "depends_on": [1]},
        ],
    },
}


async def test_a_plan_turn_bounds_its_step_agents_and_not_the_planners_own_calls(
    tenant, conversation_of, scripted_llm, seam
):
    """The planner (its planning calls and the finalizer) sends no max_tokens however its cap is set: a plan cut
    short could not be read. Each step agent's turn carries that agent's own cap."""
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False, "system_prompt": "PLANNER"}, "reply": {"tool_calls": [PLAN]}},
        {"when": {"system_prompt": "AGENT Finder"}, "reply": LONG},
        {"when": {"system_prompt": "AGENT Writer"}, "reply": LONG},
        {"when": {}, "reply": {"text": "All done."}},
    )

    def step_agents():
        with tenant_scope(tenant):
            for name, cap in (("Finder", 11), ("Writer", 13)):
                _agent(tenant, name, cap=cap, system_prompt=f"AGENT {name}", description=name)

    await database_sync_to_async(step_agents)()
    assert AgentKind.PLANNER in UNCAPPED_KINDS
    conversation = await conversation_of(AgentKind.PLANNER, cap=5, system_prompt="PLANNER")
    _user, reply, _sink = await user_turn(tenant, conversation, "Do it")
    assert reply.content == "All done."
    bodies = await _bodies(scripted_llm)
    # Who asked (the system prompt's first word or two) and the max_tokens sent.
    sent = [(" ".join(body["messages"][0]["content"].split()[:2]), body.get("max_tokens")) for body in bodies]
    assert sent == [
        ("PLANNER You", None),  # the planner's call that makes the plan
        ("AGENT Finder", 11),  # the steps, each within its agent's cap
        ("AGENT Writer", 13),
        ("Summarise the", None),  # the finalizer
    ]
    _went_through_the_seam(bodies, seam)
    own = [s for s in seam if s.agent_id == conversation.agent_id]
    assert len(own) == len(bodies) - 2 and all(s.max_tokens is None for s in own)


async def test_a_goal_runs_own_calls_are_not_bounded(tenant, member, provider, scripted_llm, seam):
    """A goal agent's calls (M2, and M1 through execute_task) send no max_tokens: a tool call cut short could not
    be read."""
    scripted_llm.set_rules(
        {
            "when": {"model": PLANNING},
            "times": 1,
            "reply": {"tool_calls": [{"name": "execute_task", "arguments": {"task": "Count to three."}}]},
        },
        {"when": {"model": EXECUTION}, "reply": LONG},
        {"when": {"model": PLANNING}, "reply": {"tool_calls": [{"name": "finish", "arguments": {"result": "3"}}]}},
    )

    def start():
        with tenant_scope(tenant):
            agent = _agent(tenant, "Counter", kind=AgentKind.GOAL, cap=5, model="", publish=False)
            return agent, goal_run_start(agent=agent, user=member, goal="Count.", queue=False)

    agent, run = await database_sync_to_async(start)()

    def advance():
        with tenant_scope(tenant):
            return async_to_sync(advance_run)(run_id=run.pk, iterations=5)

    await asyncio.to_thread(advance)
    bodies = await _bodies(scripted_llm)
    assert [(body["model"], body.get("max_tokens")) for body in bodies] == [
        (PLANNING, None),
        (EXECUTION, None),
        (PLANNING, None),
    ]
    _went_through_the_seam(bodies, seam)
    assert [(s.agent_id, s.purpose) for s in seam] == [
        (agent.pk, Purpose.PLAN),
        (agent.pk, Purpose.CHAT),
        (agent.pk, Purpose.PLAN),
    ]


# --- every registered runner ends a turn the same way -----------------------------------------------------------

RUNNER_KINDS = sorted(runtime._runners.keys())


def test_every_agent_kind_has_a_runner_and_is_checked_below():
    assert set(RUNNER_KINDS) == set(AgentKind.values)


class RaisesOnce(Collector):
    """A sink whose first frame raises, as any failure inside a runner would."""

    def __init__(self) -> None:
        super().__init__()
        self.raised = False

    async def emit(self, frame: frames.Frame) -> frames.Logged:
        if not self.raised:
            self.raised = True
            raise RuntimeError("the runner broke")
        return await super().emit(frame)


class CancelsAtFirstDelta(Collector):
    """A sink that cancels the turn's task once the first piece of the reply went out."""

    async def emit(self, frame: frames.Frame) -> frames.Logged:
        delivered = await super().emit(frame)
        if isinstance(frame, frames.Delta) and len(self.of("delta")) == 1:
            asyncio.current_task().cancel()
            await asyncio.sleep(0)  # a real sink's write: the cancellation lands here
        return delivered


async def _run(tenant, conversation, sink, *, stop=None):
    def add():
        with tenant_scope(tenant):
            return message_add(conversation=conversation, role="user", content="rain")

    user = await database_sync_to_async(add)()
    with tenant_scope(tenant):
        result = await run_turn(conversation=conversation, user_message=user, sink=sink, stop=stop)
        await flush_records()
    return user, result


def _replies(tenant, conversation):
    with tenant_scope(tenant):
        return list(
            Message.objects.filter(conversation=conversation, role="assistant").values_list(
                "status", "error_code", "content"
            )
        )


@pytest.mark.parametrize("kind", RUNNER_KINDS)
async def test_a_raise_in_any_runner_is_one_error_frame(tenant, conversation_of, scripted_llm, kind):
    conversation = await conversation_of(kind)
    sink = RaisesOnce()
    user, result = await _run(tenant, conversation, sink)
    assert result.status == "failed" and result.error_code == "provider_error"
    errors = sink.of("error")
    assert len(errors) == 1 and sink.types()[-1] == "error" and errors[0]["user_message_id"] == user.pk
    ((_status, code, _text),) = await database_sync_to_async(_replies)(tenant, conversation)
    assert code == "provider_error"


@pytest.mark.parametrize("kind", RUNNER_KINDS)
async def test_a_raise_while_any_runner_prepares_is_one_error_frame(
    tenant, conversation_of, scripted_llm, kind, monkeypatch
):
    """A runner's `prepare` runs in the turn's setup hop, away from `execute`'s handling: what it raises still
    ends the turn failed, with one error frame and the message kept."""

    def broken(turn):
        raise RuntimeError("the history could not be read")

    monkeypatch.setattr(runtime.runner_for(kind), "prepare", broken)
    conversation = await conversation_of(kind)
    sink = Collector()
    user, result = await _run(tenant, conversation, sink)
    assert result.status == "failed" and result.error_code == "provider_error"
    assert sink.types() == ["error"] and sink.of("error")[0]["user_message_id"] == user.pk
    ((_status, code, _text),) = await database_sync_to_async(_replies)(tenant, conversation)
    assert code == "provider_error"


@pytest.mark.parametrize("kind", RUNNER_KINDS)
async def test_a_stop_ends_any_runners_turn_stopped(tenant, conversation_of, scripted_llm, kind):
    conversation = await conversation_of(kind)
    stop = asyncio.Event()
    stop.set()
    sink = Collector()
    _user, result = await _run(tenant, conversation, sink, stop=stop)
    assert result.status == "stopped" and result.error_code == "cancelled"
    assert [frame["code"] for frame in sink.of("error")] == ["cancelled"] and sink.types()[-1] == "error"
    assert await _bodies(scripted_llm) == []


@pytest.mark.parametrize("kind", [kind for kind in RUNNER_KINDS if kind != AgentKind.GOAL])  # goal: no model call
async def test_a_stop_while_the_model_answers_ends_the_turn_stopped(
    tenant, conversation_of, scripted_llm, monkeypatch, kind
):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 200, "delay": 0.01}})
    stop = asyncio.Event()
    fill = AgentModel.request

    def stopping(self, request):
        stop.set()  # Stop pressed as the model is asked
        return fill(self, request)

    monkeypatch.setattr(AgentModel, "request", stopping)
    conversation = await conversation_of(kind)
    sink = Collector()
    _user, result = await _run(tenant, conversation, sink, stop=stop)
    assert result.status == "stopped" and result.error_code == "cancelled"
    assert [frame["code"] for frame in sink.of("error")] == ["cancelled"]
    assert len(await _bodies(scripted_llm)) == 1


@pytest.mark.parametrize("kind", RUNNER_KINDS)
async def test_a_cancel_keeps_any_runners_partial_reply(tenant, conversation_of, scripted_llm, kind):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "It may rain later today, take an umbrella with you."}})
    conversation = await conversation_of(kind)
    sink = CancelsAtFirstDelta()
    turn = asyncio.create_task(_run(tenant, conversation, sink))  # the task the sink cancels
    with pytest.raises(asyncio.CancelledError):
        await turn
    await flush_records()
    ((status, code, text),) = await database_sync_to_async(_replies)(tenant, conversation)
    first = sink.of("delta")[0]["content"]
    assert (status, code) == (MessageStatus.PARTIAL, "cancelled") and text == first

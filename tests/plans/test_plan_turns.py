"""A plan turn ends like every turn (agents.runtime.TurnRunner): a model error is one error frame and a failed
result with the user's message kept; Stop reaches the running step and ends the plan stopped."""

import asyncio

import pytest

from agents import frames
from core.db import database_sync_to_async
from memory.models import Conversation, Message
from plans.models import Plan
from tenants.scope import tenant_scope
from tests.plans.test_plans import PLAN, _plan, setup  # noqa: F401 - the fixture
from tests.turns import Collector, user_turn

pytestmark = pytest.mark.django_db(transaction=True)

FAIL = {"error": {"status": 500}}


def _stored(tenant, conversation):
    with tenant_scope(tenant):
        return list(Message.objects.filter(conversation=conversation).order_by("id").values_list("role", "status"))


async def test_the_planner_model_failing_is_one_error_frame_and_a_failed_turn(tenant, setup, scripted_llm):  # noqa: F811
    scripted_llm.set_rules({"when": {"system_prompt": "PLANNER"}, "reply": FAIL})
    conversation = await setup()
    user, _reply, sink = await user_turn(tenant, conversation, "Plan my roof")
    errors = sink.of("error")
    assert len(errors) == 1 and errors[0]["index"] == 0 and errors[0]["user_message_id"] == user.pk
    assert sink.types()[-1] == "error" and sink.result.status == "failed" and sink.result.error_code
    assert (await database_sync_to_async(_stored)(tenant, conversation))[0] == ("user", "complete")
    assert not await database_sync_to_async(_has_plan)(tenant)


async def test_a_finalizer_error_fails_the_plan_and_keeps_the_step_outputs(tenant, setup, scripted_llm):  # noqa: F811
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False, "system_prompt": "PLANNER"}, "reply": {"tool_calls": [PLAN]}},
        {"when": {"system_prompt": "AGENT Finder"}, "reply": {"text": "found it"}},
        {"when": {"system_prompt": "AGENT Writer"}, "reply": {"text": "written"}},
        {"when": {"system_prompt": "Summarise"}, "reply": FAIL},
    )
    conversation = await setup()
    _user, reply, sink = await user_turn(tenant, conversation, "Do it")
    plan, steps = await database_sync_to_async(_plan)(tenant)
    assert plan.status == "failed" and [s.status for s in steps] == ["completed", "completed"]
    assert [f["index"] for f in sink.of("error")] == [0] and sink.result.status == "failed"
    assert reply.status == "partial" and "found it" in reply.content and "written" in reply.content
    assert sink.of("plan")[-1]["plan"]["status"] == "failed"


class StopAtFirstStepDelta(Collector):
    def __init__(self, stop: asyncio.Event) -> None:
        super().__init__()
        self.stop = stop

    async def emit(self, frame):
        delivered = await super().emit(frame)
        if isinstance(delivered.frame, frames.Delta) and delivered.frame.index == 1:
            self.stop.set()
        return delivered


async def test_stop_during_a_step_stops_the_step_and_the_plan_with_the_partial_output(tenant, setup, scripted_llm):  # noqa: F811
    from agents.runtime import run_turn
    from memory.services import message_add

    scripted_llm.set_rules(
        {"when": {"has_tool_results": False, "system_prompt": "PLANNER"}, "reply": {"tool_calls": [PLAN]}},
        {"when": {"system_prompt": "AGENT Finder"},
         "reply": {"text": "searching the tariffs of every province one by one", "delay": 0.05}},
        {"when": {}, "reply": {"text": "never"}},
    )  # fmt: skip
    conversation = await setup()
    user = await database_sync_to_async(lambda: _add(tenant, conversation, message_add))()
    stop = asyncio.Event()
    sink = StopAtFirstStepDelta(stop)
    with tenant_scope(tenant):
        result = await run_turn(conversation=conversation, user_message=user, sink=sink, stop=stop)
    plan, steps = await database_sync_to_async(_plan)(tenant)
    assert result.status == "stopped" and result.error_code == "cancelled"
    assert plan.status == "stopped" and [s.status for s in steps] == ["stopped", "not_started"]
    partial = steps[0].result["output"]
    assert partial and "searching the tariffs of every province one by one".startswith(partial)
    child = await database_sync_to_async(lambda: _child_reply(tenant, conversation))()
    assert child == ("partial", "cancelled", partial)
    assert [f["code"] for f in sink.of("error")] == ["cancelled"] and sink.types()[-1] == "error"
    bodies = [r["body"] for r in await asyncio.to_thread(scripted_llm.requests)]
    assert not any("AGENT Writer" in b["messages"][0]["content"] for b in bodies)  # the next step never ran


def _add(tenant, conversation, message_add):
    with tenant_scope(tenant):
        return message_add(conversation=conversation, role="user", content="Do it")


def _child_reply(tenant, parent):
    with tenant_scope(tenant):
        child = Conversation.objects.get(parent=parent)
        message = Message.objects.filter(conversation=child, role="assistant").order_by("-id").first()
        return message.status, message.error_code, message.content


def _has_plan(tenant):
    with tenant_scope(tenant):
        return Plan.objects.exists()

"""Traces of a planner's turn: a span per plan step, the step agent's own turn under it (core.tracing)."""

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from core import tracing
from core.db import database_sync_to_async
from tests.core.traces import tree
from tests.plans.test_plans import PLAN, _plan, setup  # noqa: F401 - the fixture
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.use_provider(tracing.provider_with(SimpleSpanProcessor(exporter)))
    yield exporter
    tracing.reset()


async def test_each_plan_step_is_a_span_with_the_step_agents_turn_under_it(tenant, setup, scripted_llm, spans):  # noqa: F811
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False, "system_prompt": "PLANNER"}, "reply": {"tool_calls": [PLAN]}},
        {"when": {"system_prompt": "AGENT Finder"}, "reply": {"text": "found it"}},
        {"when": {"system_prompt": "AGENT Writer"}, "reply": {"text": "written"}},
        {"when": {}, "reply": {"text": "All done."}},
    )
    conversation = await setup()
    await user_turn(tenant, conversation, "Do it")
    plan, steps = await database_sync_to_async(_plan)(tenant)
    finished = spans.get_finished_spans()
    assert tree(finished) == [
        (0, "invoke_agent Planner"),
        (1, "chat gpt-4"),
        (1, "plan_step 1"),
        (2, "invoke_agent Finder"),
        (3, "chat gpt-4"),
        (1, "plan_step 2"),
        (2, "invoke_agent Writer"),
        (3, "chat gpt-4"),
        (1, "chat gpt-4"),
    ]
    named = {span.name: span for span in finished}
    for step in steps:
        attributes = dict(named[f"plan_step {step.seqNo}"].attributes)
        assert {key: value for key, value in attributes.items() if key.startswith("agentplat.plan.")} == {
            "agentplat.plan.id": plan.pk,
            "agentplat.plan.step": step.seqNo,
            "agentplat.plan.step_agent": step.agentName,
            "agentplat.plan.step_status": "completed",
        }
        # The step's span carries the planner's conversation; the step agent's turn its own child conversation.
        assert attributes["gen_ai.conversation.id"] == str(conversation.pk)
        child_turn = named[f"invoke_agent {step.agentName}"].attributes
        assert child_turn["gen_ai.conversation.id"] != str(conversation.pk)
        assert child_turn["agentplat.conversation.parent_id"] == conversation.pk

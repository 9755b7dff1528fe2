"""/v1 usage is the whole turn's: with the real openai SDK against Daphne, an agent whose own tool runs makes two
model calls, and the answer's usage (streamed with include_usage, and not) is the sum of the two LLMCall rows; a tool
that asks a model itself (deep_think) adds its call too."""

from __future__ import annotations

import openai
import pytest

from agents.services import agent_create, agent_publish
from agents.tools import ToolResult, python_tool
from agents.workflows.services import workflow_save
from llm.models import LLMCall, ModelProvider
from tenants.scope import all_tenants, tenant_scope
from tests.agents.factories import THINKER_WORKFLOW

pytestmark = pytest.mark.django_db(transaction=True)


@python_tool(
    name="usage_house_rate",
    description_en="The platform's own rate for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
def usage_house_rate(city: str) -> ToolResult:
    return ToolResult(content=f"house rate for {city}: 42")


@pytest.fixture
def rates(tenant, scripted_llm, published):
    """A published agent with one tool of its own; the model calls it first, then answers from its result."""
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Rates", system_prompt="You quote rates.", model="gpt-4")
        agent.tools = ["usage_house_rate"]
        agent.save()
        agent_publish(agent=agent, user=None)
    scripted_llm.set_rules(
        {"name": "own", "when": {"has_tool_results": False},
         "reply": {"tool_calls": [{"name": "usage_house_rate", "arguments": {"city": "Lyon"}}]}},
        {"name": "answer", "when": {"has_tool_results": True}, "reply": {"text": "Quoted: {last_message}"}},
    )  # fmt: skip
    return agent


def _client(server, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0, timeout=20)


def _calls(conversation_id: int) -> list[LLMCall]:
    with all_tenants(reason="test reads the turn's model calls"):
        return list(LLMCall.objects.filter(conversation_id=conversation_id).order_by("id"))


def _assert_sum(usage, conversation_id: int, calls_made: int = 2) -> None:
    calls = _calls(conversation_id)
    assert len(calls) == calls_made
    assert all(call.prompt_tokens > 0 and call.completion_tokens > 0 for call in calls)
    assert usage.prompt_tokens == sum(call.prompt_tokens for call in calls)
    assert usage.completion_tokens == sum(call.completion_tokens for call in calls)
    assert usage.total_tokens == sum(call.total_tokens for call in calls)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_usage_sums_every_model_call_of_the_turn(asgi_live_server, rates, tenant_admin, make_key, scripted_llm):
    _key, secret = make_key(tenant_admin)
    reply = _client(asgi_live_server, secret).chat.completions.create(
        model=rates.slug, messages=[{"role": "user", "content": "rate for Lyon?"}]
    )
    assert reply.choices[0].message.content == "Quoted: house rate for Lyon: 42"
    assert len(scripted_llm.requests()) == 2
    _assert_sum(reply.usage, reply.model_extra["conversation_id"])


def test_streamed_usage_sums_every_model_call_of_the_turn(asgi_live_server, rates, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)
    chunks = list(
        _client(asgi_live_server, secret).chat.completions.create(
            model=rates.slug,
            messages=[{"role": "user", "content": "rate for Lyon?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Quoted: house rate for Lyon: 42"
    last = chunks[-1]
    assert last.choices == [] and all(chunk.usage is None for chunk in chunks[:-1])
    _assert_sum(last.usage, last.model_extra["conversation_id"])


def test_usage_counts_the_model_call_of_a_tool_that_asks_a_model(
    asgi_live_server, tenant, published, tenant_admin, make_key, scripted_llm
):
    with tenant_scope(tenant):
        ModelProvider.objects.filter(tenant=tenant).update(reasoning_model="deep-r1")
        agent = agent_create(tenant=tenant, name="Thinker", system_prompt="You think.", model="gpt-4")
        agent.tools = ["deep_think"]
        agent.save()
        agent_publish(agent=agent, user=None)
    scripted_llm.set_rules(
        {"when": {"model": "deep-r1"}, "reply": {"text": "3 × 4 = 12.\n结论/Conclusion: 12"}},
        {"when": {"has_tool_results": False},
         "reply": {"tool_calls": [{"name": "deep_think", "arguments": {"question": "3 × 4?"}}]}},
        {"when": {}, "reply": {"text": "It is 12."}},
    )  # fmt: skip
    _key, secret = make_key(tenant_admin)
    reply = _client(asgi_live_server, secret).chat.completions.create(
        model=agent.slug, messages=[{"role": "user", "content": "3 × 4?"}]
    )
    assert reply.choices[0].message.content == "It is 12."
    assert [request["body"]["model"] for request in scripted_llm.requests()] == ["gpt-4", "deep-r1", "gpt-4"]
    _assert_sum(reply.usage, reply.model_extra["conversation_id"], calls_made=3)


THINKER = THINKER_WORKFLOW


def test_usage_counts_a_workflow_agents_llm_steps(asgi_live_server, tenant, published, tenant_admin, make_key):
    """A workflow agent's turn makes its model calls in llm steps; they are the turn's usage too (was 0)."""
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Thinker flow", kind="workflow", model="gpt-4")
        workflow_save(tenant=tenant, yaml_text=THINKER, agent=agent)
        agent_publish(agent=agent, user=None)
    _key, secret = make_key(tenant_admin)
    reply = _client(asgi_live_server, secret).chat.completions.create(
        model=agent.slug, messages=[{"role": "user", "content": "x: tides"}]
    )
    _assert_sum(reply.usage, reply.model_extra["conversation_id"], calls_made=1)

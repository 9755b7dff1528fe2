"""The tool loop with function calling, against the scripted OpenAI-compatible server."""

import asyncio
import json

import pytest

from agents import runtime
from agents.runtime import register_runner
from agents.services import agent_create, conversation_start
from agents.tools import ToolError, ToolResult, python_tool
from core.db import database_sync_to_async
from memory.models import ConversationContext, Message
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)

RUNS: list[tuple[str, dict]] = []


@python_tool(
    name="tl_weather",
    label_en="City weather",
    label_zh="城市天气",
    description_en="The weather in a city.",
    description_zh="查询城市天气。",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
)
def tl_weather(city, days=1, call=None):
    RUNS.append(("tl_weather", {"city": city, "days": days, "context": dict(call.context)}))
    return ToolResult(content=f"Sunny in {city}", context={"weather_city": city})


@python_tool(
    name="tl_forecast",
    description_en="A forecast for the city the weather tool looked up.",
    parameters={"type": "object", "properties": {}},
)
def tl_forecast(call):
    RUNS.append(("tl_forecast", {"context": dict(call.context)}))
    return {"city": call.context.get("weather_city"), "forecast": "rain"}


@python_tool(name="tl_secret", description_en="Not configured for the agent.")
def tl_secret():
    RUNS.append(("tl_secret", {}))
    return "secret"


@python_tool(name="tl_ask", description_en="Asks the user.", parameters={"type": "object", "properties": {}})
def tl_ask():
    RUNS.append(("tl_ask", {}))
    return ToolResult(content="asked", ask_user="Which city do you mean?")


@python_tool(name="tl_slow", description_en="Takes its time.", parameters={"type": "object", "properties": {}})
async def tl_slow():
    await asyncio.sleep(5)
    RUNS.append(("tl_slow", {}))


@python_tool(name="tl_broken", description_en="Refuses.", parameters={"type": "object", "properties": {}})
def tl_broken():
    RUNS.append(("tl_broken", {}))
    raise ToolError("the kitchen is closed")


async def _turn(tenant, conversation, text):
    _user, reply, sink = await user_turn(tenant, conversation, text)
    return reply, sink


@pytest.fixture(autouse=True)
def _clean():
    RUNS.clear()


@pytest.fixture
def make_conversation(tenant, member, scripted_llm):
    def _make(tools=("tl_weather", "tl_forecast", "tl_ask"), kind="chat"):
        with tenant_scope(tenant):
            ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True,
                                 max_retries=0)  # fmt: skip
            agent = agent_create(
                tenant=tenant, name="Weather", system_prompt="You report the weather.", model="gpt-4",
                kind=kind, token_overflow_config={"strategy": "none"},
            )  # fmt: skip
            agent.tools = list(tools)
            agent.full_clean()
            agent.save()
            return conversation_start(agent=agent, user=member)

    return database_sync_to_async(_make)


def _messages(tenant, conversation):
    with tenant_scope(tenant):
        return list(Message.objects.filter(conversation=conversation).order_by("id"))


async def _requests(scripted_llm):
    return [r["body"] for r in await asyncio.to_thread(scripted_llm.requests)]


def call(name, arguments, **extra):
    return {"name": name, "arguments": arguments, **extra}


async def test_a_tool_call_runs_the_tool_and_the_answer_streams(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False}, "reply": {"tool_calls": [call("tl_weather", {"city": "Paris"})]}},
        {"when": {"has_tool_results": True}, "reply": {"text": "It is sunny in Paris.", "chunk_size": 5}},
    )
    conversation = await make_conversation()
    reply, sink = await _turn(tenant, conversation, "Weather in Paris?")

    assert RUNS == [("tl_weather", {"city": "Paris", "days": 1, "context": {}})]
    assert "".join(f["content"] for f in sink.of("delta")) == "It is sunny in Paris."
    tools = sink.of("tool")
    assert [t["status"] for t in tools] == ["started", "completed"]
    assert tools[1]["arguments"] == {"city": "Paris"} and tools[1]["result"] == "Sunny in Paris"
    assert sink.frames[-1]["type"] == "done" and reply.content == "It is sunny in Paris."
    first, second = await _requests(scripted_llm)
    assert [t["function"]["name"] for t in first["tools"]] == ["tl_weather", "tl_forecast", "tl_ask"]
    assert second["messages"][-1]["role"] == "tool" and second["messages"][-1]["content"] == "Sunny in Paris"
    assert [m["role"] for m in second["messages"]].count("system") == 1
    rows = await database_sync_to_async(_messages)(tenant, conversation)
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[2].tool_call_id == rows[1].tool_calls[0]["id"]


async def test_a_missing_required_argument_is_asked_for_and_nothing_runs(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Which city?"}})
    conversation = await make_conversation()
    reply, sink = await _turn(tenant, conversation, "What's the weather?")
    assert RUNS == [] and reply.content == "Which city?" and not sink.of("tool")


async def test_an_invalid_argument_goes_back_to_the_model_and_the_repaired_call_runs(
    tenant, make_conversation, scripted_llm
):
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False}, "reply": {"tool_calls": [call("tl_weather", {"city": 42})]}},
        {
            "when": {"last_message": "invalid arguments"},
            "reply": {"tool_calls": [call("tl_weather", {"city": "Oslo"})]},
        },
        {"when": {}, "reply": {"text": "Sunny in Oslo."}},
    )
    conversation = await make_conversation()
    reply, sink = await _turn(tenant, conversation, "Weather?")
    assert RUNS == [("tl_weather", {"city": "Oslo", "days": 1, "context": {}})]
    bodies = await _requests(scripted_llm)
    error = bodies[1]["messages"][-1]
    assert error["role"] == "tool" and "city" in error["content"] and "is not of type 'string'" in error["content"]
    assert [t["status"] for t in sink.of("tool") if t["status"] != "started"] == ["failed", "completed"]
    assert reply.content == "Sunny in Oslo."


async def test_invalid_json_counts_as_invalid(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False},
         "reply": {"tool_calls": [call("tl_weather", {"city": "Oslo"})], "malformed_tool_json": True}},
        {"when": {}, "reply": {"text": "Sorry."}},
    )  # fmt: skip
    conversation = await make_conversation()
    await _turn(tenant, conversation, "Weather?")
    assert RUNS == []
    assert "Invalid JSON" in (await _requests(scripted_llm))[1]["messages"][-1]["content"]


async def test_a_tool_the_agent_lacks_is_refused(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False}, "reply": {"tool_calls": [call("tl_secret", {})]}},
        {"when": {}, "reply": {"text": "I cannot."}},
    )
    conversation = await make_conversation()
    await _turn(tenant, conversation, "secret please")
    assert RUNS == []
    result = (await _requests(scripted_llm))[1]["messages"][-1]["content"]
    assert "tool tl_secret is not available to this agent" in result


async def test_parallel_calls_both_run_and_are_stored_paired(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False},
         "reply": {"tool_calls": [call("tl_weather", {"city": "Rome"}), call("tl_weather", {"city": "Nice"})],
                   "interleave_tool_calls": True}},
        {"when": {}, "reply": {"text": "Both sunny."}},
    )  # fmt: skip
    conversation = await make_conversation()
    await _turn(tenant, conversation, "Rome and Nice?")
    assert sorted(run[1]["city"] for run in RUNS) == ["Nice", "Rome"]
    rows = await database_sync_to_async(_messages)(tenant, conversation)
    assert [m.role for m in rows] == ["user", "assistant", "tool", "tool", "assistant"]
    ids = [c["id"] for c in rows[1].tool_calls]
    assert [rows[2].tool_call_id, rows[3].tool_call_id] == ids
    assert [rows[2].content, rows[3].content] == ["Sunny in Rome", "Sunny in Nice"]


async def test_tool_context_flows_to_the_next_tool_without_the_prompt(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False}, "reply": {"tool_calls": [call("tl_weather", {"city": "Lima"})]}},
        {"when": {"last_message": "Sunny in"}, "reply": {"tool_calls": [call("tl_forecast", {})]}},
        {"when": {}, "reply": {"text": "Rain tomorrow."}},
    )
    conversation = await make_conversation()
    await _turn(tenant, conversation, "Lima?")
    assert RUNS[1] == ("tl_forecast", {"context": {"weather_city": "Lima"}})
    for body in await _requests(scripted_llm):
        assert "weather_city" not in json.dumps(body)

    def kept():
        with tenant_scope(tenant):
            return ConversationContext.objects.get(conversation=conversation).tool_context

    assert await database_sync_to_async(kept)() == {"weather_city": "Lima"}
    # The next turn of the conversation starts with it.
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False}, "reply": {"tool_calls": [call("tl_forecast", {})]}},
        {"when": {}, "reply": {"text": "Still rain."}},
    )
    await _turn(tenant, conversation, "And now?")
    assert RUNS[-1] == ("tl_forecast", {"context": {"weather_city": "Lima"}})


async def test_the_iteration_limit_ends_the_loop(tenant, make_conversation, scripted_llm, settings):
    settings.AGENT_MAX_TOOL_ITERATIONS = 2
    scripted_llm.set_rules({"when": {}, "reply": {"tool_calls": [call("tl_weather", {"city": "Bern"})]}})
    conversation = await make_conversation()
    reply, sink = await _turn(tenant, conversation, "Loop!")
    assert len(RUNS) == 2 and len(await _requests(scripted_llm)) == 3
    assert "2 rounds of tool calls" in reply.content and sink.frames[-1]["type"] == "done"


async def test_ask_user_ends_the_turn_with_the_question(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"tool_calls": [call("tl_ask", {})]}})
    conversation = await make_conversation()
    reply, sink = await _turn(tenant, conversation, "Weather")
    assert reply.content == "Which city do you mean?" and len(await _requests(scripted_llm)) == 1
    assert "".join(f["content"] for f in sink.of("delta")) == "Which city do you mean?"
    rows = await database_sync_to_async(_messages)(tenant, conversation)
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant"]


@pytest.fixture
def planner_kind_free():
    # The planner's runner gives way to the test's for this test only.
    with runtime._runners.restored() as runners:
        runners.unregister("planner")
        yield


async def test_a_registered_runner_answers_its_kind(tenant, make_conversation, scripted_llm, planner_kind_free):
    seen = []

    class Echo(runtime.TurnRunner):
        kinds = ("planner",)

        async def run(self, turn):
            seen.append((turn.conversation.pk, turn.config.kind, turn.user_message.content))
            await turn.say("echo")
            return await turn.finish("echo")

    register_runner(Echo())
    conversation = await make_conversation(tools=(), kind="planner")
    reply, sink = await _turn(tenant, conversation, "hi")
    assert seen == [(conversation.pk, "planner", "hi")] and await _requests(scripted_llm) == []
    assert reply.content == "echo" and sink.types() == ["delta", "step", "done"]


async def test_a_slow_tool_times_out_and_a_tool_error_goes_back_to_the_model(
    tenant, make_conversation, scripted_llm, settings
):
    settings.AGENT_TOOL_TIMEOUT = 0.05
    scripted_llm.set_rules(
        {"when": {"has_tool_results": False}, "reply": {"tool_calls": [call("tl_slow", {}), call("tl_broken", {})]}},
        {"when": {}, "reply": {"text": "Sorry."}},
    )
    conversation = await make_conversation(tools=("tl_slow", "tl_broken"))
    reply, sink = await _turn(tenant, conversation, "go")
    results = [m["content"] for m in (await _requests(scripted_llm))[1]["messages"] if m["role"] == "tool"]
    assert results == ["Error: tl_slow did not answer within 0.05 seconds.", "Error: the kitchen is closed"]
    assert [f["status"] for f in sink.of("tool") if f["status"] != "started"] == ["failed", "failed"]
    assert RUNS == [("tl_broken", {})] and reply.content == "Sorry."
    # Stored as failed too (the model still reads why): a reloaded page says "failed", as the live frames did.
    stored = await database_sync_to_async(_tool_results)(tenant, conversation)
    assert stored == [("Error: tl_slow did not answer within 0.05 seconds.", "error"),
                      ("Error: the kitchen is closed", "error")]  # fmt: skip


def _tool_results(tenant, conversation):
    with tenant_scope(tenant):
        return list(conversation.messages.filter(role="tool").order_by("id").values_list("content", "status"))


# --- the agent pages: the tools field and the detail list ---------------------------------------------------------


@pytest.mark.django_db(transaction=False)
def test_the_form_offers_the_registered_tools_and_saves_the_choice(login, tenant_admin, tenant):
    from django.urls import reverse

    from agents.models import Agent
    from tests.agents.test_views import EN, _form

    client = login(tenant_admin, tenant)
    page = client.get(reverse("agents:create"), **EN).content.decode()
    assert 'value="tl_weather"' in page and "The weather in a city." in page
    zh = client.get(reverse("agents:create"), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "查询城市天气。" in zh and "城市天气" in zh  # the tool's label in the page's language

    response = client.post(reverse("agents:create"), _form(tools=["tl_weather", "tl_ask"]), **EN)
    assert response.status_code == 302
    with tenant_scope(tenant):
        agent = Agent.objects.get(name="Grid helper")
    assert agent.tools == ["tl_weather", "tl_ask"]
    detail = client.get(reverse("agents:detail", args=[agent.pk]), **EN).content.decode()
    assert 'title="tl_weather">City weather</span> — The weather in a city.' in detail and "tl_forecast" not in detail

    response = client.post(reverse("agents:edit", args=[agent.pk]), _form(tools=["no_such_tool"]), **EN)
    assert response.status_code == 200 and "no_such_tool" in str(response.context["form"].errors["tools"])

"""The OpenAI endpoint's fields beyond a plain reply, with real clients (the openai SDK, LangChain) against Daphne
serving the project and the scripted model behind the agents: the client's own tools and their results, structured
output, the sampling fields, n, GET /v1/models/{id}, OpenAI error objects for every /v1 path, random ids."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest
from pydantic import BaseModel

from agents.services import agent_create, agent_publish
from agents.tools import ToolResult, python_tool
from llm import tokens
from memory.models import Message
from tenants.scope import all_tenants, tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city (the client looks it up).",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK_WEATHER = "Use the tool get_weather, city: Paris"
RATES_RUN: list[str] = []


@python_tool(
    name="oai_house_rate",
    description_en="The platform's own rate for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
def oai_house_rate(city: str) -> ToolResult:
    RATES_RUN.append(city)
    return ToolResult(content=f"house rate for {city}: 42")


@pytest.fixture
def server(asgi_live_server):
    return asgi_live_server


def _client(server, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0, timeout=20)


def _stored(conversation_id: int) -> list[tuple[str, str, list | None, str]]:
    with all_tenants(reason="test reads what was stored"):
        rows = Message.objects.filter(conversation_id=conversation_id).order_by("id")
        return [(m.role, m.content, m.tool_calls, m.tool_call_id) for m in rows]


def test_a_client_tool_is_called_then_its_result_continues_the_turn(
    server, published, tenant_admin, make_key, scripted_llm
):
    _key, secret = make_key(tenant_admin)
    client = _client(server, secret)
    asked = [{"role": "user", "content": ASK_WEATHER}]
    first = client.chat.completions.create(model=published.solar.slug, messages=asked, tools=[WEATHER_TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    sent = scripted_llm.requests()[-1]["body"]
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["get_weather"]
    assert [role for role, *_rest in _stored(first.model_extra["conversation_id"])] == ["user", "assistant"]

    with pytest.raises(openai.ConflictError) as pending:  # its results come with the whole history
        client.chat.completions.create(
            model=published.solar.slug,
            messages=[{"role": "user", "content": "and?"}],
            metadata={"conversation_id": str(first.model_extra["conversation_id"])},
        )
    assert pending.value.code == "tool_results_pending"
    # Refused by the message's own insert, which its transaction took back: nothing of "and?" is stored.
    assert [role for role, *_rest in _stored(first.model_extra["conversation_id"])] == ["user", "assistant"]
    history = [*asked, choice.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}]  # fmt: skip
    final = client.chat.completions.create(model=published.solar.slug, messages=history, tools=[WEATHER_TOOL])
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content == "You said: Sunny, 21 C"  # the model read the client's result
    sent = scripted_llm.requests()[-1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[2]["tool_calls"][0]["id"] == call.id and sent[3]["tool_call_id"] == call.id
    stored = _stored(final.model_extra["conversation_id"])
    assert [(role, call_id) for role, _c, _t, call_id in stored] == [
        ("user", ""), ("assistant", ""), ("tool", call.id), ("assistant", ""),
    ]  # fmt: skip
    assert stored[1][2][0]["function"]["name"] == "get_weather" and stored[-1][1] == "You said: Sunny, 21 C"


def test_client_tool_calls_stream_as_openai_streams_them(server, published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)
    chunks = list(
        _client(server, secret).chat.completions.create(
            model=published.solar.slug, messages=[{"role": "user", "content": ASK_WEATHER}], tools=[WEATHER_TOOL],
            stream=True, stream_options={"include_usage": True},
        )
    )  # fmt: skip
    pieces = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    head, *rest = pieces
    assert head.index == 0 and head.id.startswith("call_") and head.function.name == "get_weather"
    assert head.function.arguments == "" and rest and all(p.id is None and p.function.name is None for p in rest)
    assert json.loads("".join(p.function.arguments for p in rest)) == {"city": "Paris"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].usage.total_tokens > 0


def test_langchain_tool_calling_agent_loop_finishes_with_the_clients_tool_result(
    server, published, tenant_admin, make_key
):
    from langchain_core.messages import HumanMessage, ToolMessage  # reason: only these tests use LangChain
    from langchain_core.tools import tool  # reason: as above
    from langchain_openai import ChatOpenAI  # reason: as above

    looked_up: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        looked_up.append(city)
        return f"It is 19 C and dry in {city}."

    _key, secret = make_key(tenant_admin)
    model = ChatOpenAI(model=published.solar.slug, base_url=f"{server.url}/v1", api_key=secret, max_retries=0)
    agent = model.bind_tools([get_weather])
    messages: list = [HumanMessage(ASK_WEATHER)]
    for _round in range(3):  # the client's own agent loop
        reply = agent.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            messages.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    assert looked_up == ["Paris"]
    assert messages[-1].content == "You said: It is 19 C and dry in Paris."
    assert [type(m).__name__ for m in messages] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]


class Person(BaseModel):
    name: str
    age: int


@pytest.mark.parametrize("method", ["json_schema", "function_calling", None], ids=["json_schema", "tools", "default"])
def test_langchain_structured_output_is_parsed(server, published, tenant_admin, make_key, scripted_llm, method):
    from langchain_openai import ChatOpenAI  # reason: only these tests use LangChain

    _key, secret = make_key(tenant_admin)
    model = ChatOpenAI(model=published.solar.slug, base_url=f"{server.url}/v1", api_key=secret, max_retries=0)
    chosen = {"method": method} if method else {}  # None: LangChain's default method
    structured = model.with_structured_output(Person, **chosen)
    person = structured.invoke("Who is this? name: Alice, age: 31")
    assert person == Person(name="Alice", age=31)
    sent = scripted_llm.requests()[-1]["body"]
    if method == "function_calling":
        assert sent["tool_choice"]["function"]["name"] == "Person"
    else:
        assert sent["response_format"]["type"] == "json_schema"


def test_json_object_and_json_schema_replies_and_one_repair(server, published, tenant_admin, make_key, scripted_llm):
    _key, secret = make_key(tenant_admin)
    client = _client(server, secret)
    plain = client.chat.completions.create(
        model=published.solar.slug, messages=[{"role": "user", "content": "say hi"}],
        response_format={"type": "json_object"},
    )  # fmt: skip
    assert json.loads(plain.choices[0].message.content) == {"reply": "You said: say hi"}

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    response_format = {"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}
    scripted_llm.set_rules(
        {"name": "careless", "when": {}, "times": 1, "reply": {"text": "Sure! Paris.", "raw": True}},
        {"name": "fixed", "when": {}, "reply": {"text": "-"}},
    )
    repaired = client.chat.completions.create(
        model=published.solar.slug, messages=[{"role": "user", "content": "city: Paris"}],
        response_format=response_format, stream=True,
    )  # fmt: skip
    assert json.loads("".join(c.choices[0].delta.content or "" for c in repaired if c.choices)) == {"city": "Paris"}
    again = scripted_llm.requests()[-1]["body"]["messages"]
    assert again[-2] == {"role": "assistant", "content": "Sure! Paris."} and "not valid JSON" in again[-1]["content"]

    scripted_llm.set_rules({"name": "stubborn", "when": {}, "reply": {"text": "Paris, I think.", "raw": True}})
    before = len(scripted_llm.requests())
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model=published.solar.slug, messages=[{"role": "user", "content": "city: Paris"}],
            response_format=response_format, extra_headers={"Accept-Language": "en"},
        )  # fmt: skip
    assert failed.value.status_code == 502 and failed.value.code == "invalid_output"
    assert "response format" in failed.value.body["message"]
    assert len(scripted_llm.requests()) - before == 2  # the answer and one repair, no more


def test_max_tokens_cuts_the_reply_and_sampling_fields_reach_the_model(
    server, published, tenant_admin, make_key, scripted_llm
):
    scripted_llm.set_rules({"name": "long", "when": {}, "reply": {"text_tokens": 60}})
    _key, secret = make_key(tenant_admin)
    client = _client(server, secret)
    cut = client.chat.completions.create(
        model=published.solar.slug, messages=[{"role": "user", "content": "talk"}], max_tokens=5,
        temperature=0.3, top_p=0.5, seed=7, stop=["zzz"], extra_body={"not_an_openai_field": 1, "logit_bias": {}},
    )  # fmt: skip
    assert cut.choices[0].finish_reason == "length"
    assert tokens.count_text(cut.choices[0].message.content, "gpt-4") == 5
    sent = scripted_llm.requests()[-1]["body"]
    assert (sent["max_tokens"], sent["temperature"], sent["top_p"], sent["seed"], sent["stop"]) == (
        5, 0.3, 0.5, 7, ["zzz"],
    )  # fmt: skip
    assert "not_an_openai_field" not in sent
    streamed = client.chat.completions.create(
        model=published.solar.slug, messages=[{"role": "user", "content": "talk"}], max_completion_tokens=3,
        stream=True,
    )  # fmt: skip
    chunks = [c for c in streamed if c.choices]
    assert tokens.count_text("".join(c.choices[0].delta.content or "" for c in chunks), "gpt-4") == 3
    assert chunks[-1].choices[0].finish_reason == "length"


def test_refused_fields_say_why(server, published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)
    client = _client(server, secret)
    asked = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError) as many:
        client.chat.completions.create(model=published.solar.slug, messages=asked, n=2)
    assert many.value.code == "unsupported_value" and many.value.body["param"] == "n"
    assert "n=1" in many.value.body["message"]
    with pytest.raises(openai.BadRequestError) as chinese:
        client.chat.completions.create(model=published.solar.slug, messages=asked, n=3,
                                       extra_headers={"Accept-Language": "zh-hans"})  # fmt: skip
    assert chinese.value.body["message"] == "每个请求只支持一个回答（n=1）：请改为发送 3 个请求。"
    refusals = [
        ({"temperature": 3}, "temperature"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0]"),
        ({"messages": [*asked, {"role": "tool", "tool_call_id": "nope", "content": "x"}]}, "messages[1].tool_call_id"),
    ]
    for fields, param in refusals:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(**{"model": published.solar.slug, "messages": asked, **fields})
        assert refused.value.body["param"] == param


def test_the_agents_own_tool_runs_in_the_platform_beside_the_clients(
    server, tenant, tenant_admin, make_key, scripted_llm, published
):
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Rates", system_prompt="You quote rates.", model="gpt-4")
        agent.tools = ["oai_house_rate"]
        agent.save()
        agent_publish(agent=agent, user=None)
    scripted_llm.set_rules(
        {"name": "own", "when": {"has_tool_results": False},
         "reply": {"tool_calls": [{"name": "oai_house_rate", "arguments": {"city": "Lyon"}}]}},
        {"name": "answer", "when": {"has_tool_results": True}, "reply": {"text": "Quoted: {last_message}"}},
    )  # fmt: skip
    RATES_RUN.clear()
    _key, secret = make_key(tenant_admin)
    reply = _client(server, secret).chat.completions.create(
        model=agent.slug, messages=[{"role": "user", "content": "rate for Lyon?"}], tools=[WEATHER_TOOL]
    )
    assert RATES_RUN == ["Lyon"]
    assert reply.choices[0].finish_reason == "stop" and not reply.choices[0].message.tool_calls
    assert reply.choices[0].message.content == "Quoted: house rate for Lyon: 42"
    first = scripted_llm.requests()[0]["body"]
    assert sorted(tool["function"]["name"] for tool in first["tools"]) == ["get_weather", "oai_house_rate"]


def test_get_model_by_id_and_other_tenants_models_are_not_found(
    server, published, tenant_admin, other_tenant, other_tenant_admin, make_key
):
    _key, secret = make_key(tenant_admin)
    client = _client(server, secret)
    found = client.models.retrieve(published.pv.slug)
    assert (found.id, found.object, found.model_extra["name"]) == ("光伏测算", "model", "光伏测算")
    for missing in (published.foreign.slug, published.draft.slug, "no-such-agent"):
        with pytest.raises(openai.NotFoundError) as refused:
            client.models.retrieve(missing)
        assert refused.value.code == "model_not_found"
    _key, theirs = make_key(other_tenant_admin, owner=other_tenant)
    assert _client(server, theirs).models.retrieve(published.foreign.slug).id == published.foreign.slug
    with pytest.raises(openai.NotFoundError):
        _client(server, theirs).models.retrieve(published.solar.slug)


def test_every_v1_answer_is_an_openai_error_object(server, published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)
    headers = {"Authorization": f"Bearer {secret}"}
    calls = [
        ("GET", "/v1/embeddings", 404), ("POST", "/v1/completions", 404), ("GET", "/v1", 404),
        ("GET", "/v1/models/", 404), ("POST", "/v1/models", 405), ("DELETE", f"/v1/models/{published.solar.slug}", 405),
        ("GET", "/v1/chat/completions", 405),
    ]  # fmt: skip
    for method, path, status in calls:
        response = httpx.request(method, f"{server.url}{path}", headers=headers, timeout=20)
        assert response.status_code == status, (method, path)
        assert response.headers["Content-Type"].startswith("application/json"), (method, path)
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_completion_ids_are_random(server, published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)
    client = _client(server, secret)
    ids = [
        client.chat.completions.create(model=published.solar.slug, messages=[{"role": "user", "content": "x"}]).id
        for _ in range(3)
    ]
    assert len(set(ids)) == 3 and all(re.fullmatch(r"chatcmpl-[0-9a-f]{29}", i) for i in ids)
    with all_tenants(reason="test reads the stored ids"):
        numbers = {str(pk) for pk in Message.objects.values_list("pk", flat=True)}
    assert not any(i.removeprefix("chatcmpl-") in numbers for i in ids)

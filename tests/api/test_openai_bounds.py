"""Bounds of /v1/chat/completions' fields (issue 34: a hostile probe sent client tool schemas of 1 MB and 200 levels,
stop strings of 1 MB and max_tokens 2^63, and all were taken). Each is now a 400 OpenAI error object naming the field,
before anything is stored or the model is called; each test is named for the finding it answers. The openai SDK
sends every one of these bodies as it is, so the tests use it against Daphne serving the project."""

from __future__ import annotations

import httpx
import openai
import pytest

from api.openai_request import (
    INT64_MAX,
    INT64_MIN,
    MAX_SCHEMA_CHARS,
    MAX_SCHEMA_DEPTH,
    MAX_STOP_CHARS,
    MAX_TOOL_DESCRIPTION_CHARS,
    MAX_TOOLS_CHARS,
)
from memory.models import Conversation
from tenants.scope import all_tenants

pytestmark = pytest.mark.django_db(transaction=True)

ASKED = [{"role": "user", "content": "hi"}]
MEGABYTE = 1_000_000


@pytest.fixture
def server(asgi_live_server):
    return asgi_live_server


@pytest.fixture
def client(server, tenant_admin, make_key, published) -> openai.OpenAI:
    _key, secret = make_key(tenant_admin)
    return openai.OpenAI(
        base_url=f"{server.url}/v1",
        api_key=secret,
        max_retries=0,
        timeout=30,
        default_headers={"Accept-Language": "en"},
    )  # the assertions read the English words


def _conversations() -> int:
    with all_tenants(reason="test counts what was stored"):
        return Conversation.objects.count()


def _refused(client: openai.OpenAI, model: str, **fields) -> dict:
    """Send the fields; the answer must be a 400 invalid_request_error, with nothing stored. Its error object."""
    before = _conversations()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**{"model": model, "messages": ASKED, **fields})
    assert refused.value.status_code == 400 and refused.value.body["type"] == "invalid_request_error"
    assert refused.value.body["message"]
    assert _conversations() == before
    return refused.value.body


def _tool(name: str = "lookup", parameters: dict | None = None, **function) -> dict:
    schema = parameters if parameters is not None else {"type": "object", "properties": {"q": {"type": "string"}}}
    return {"type": "function", "function": {"name": name, "parameters": schema, **function}}


def _nested(levels: int) -> dict:
    """An object schema `levels` JSON levels deep (each property adds two: `properties` and the schema in it)."""
    schema: dict = {"type": "string"}
    for _level in range((levels - 1) // 2):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _wide(chars: int) -> dict:
    """An object schema of about `chars` characters of JSON."""
    properties = {f"p{n:06d}": {"type": "string"} for n in range(chars // 30 + 1)}
    return {"type": "object", "properties": properties}


def test_finding_a_tool_schema_of_a_megabyte_is_refused(client, published, scripted_llm):
    before = len(scripted_llm.requests())
    error = _refused(client, published.solar.slug, tools=[_tool(parameters=_wide(MEGABYTE))])
    assert error["param"] == "tools[0].function.parameters" and error["code"] == "too_large"
    assert f"at most {MAX_SCHEMA_CHARS}" in error["message"]
    assert len(scripted_llm.requests()) == before  # the model never saw it
    # Within the bound it is offered to the model.
    client.chat.completions.create(model=published.solar.slug, messages=ASKED,
                                   tools=[_tool(parameters=_wide(MAX_SCHEMA_CHARS - 1000))])  # fmt: skip
    assert len(scripted_llm.requests()[-1]["body"]["tools"][0]["function"]["parameters"]["properties"]) > 1000


def test_finding_a_tool_schema_nested_200_levels_is_refused(client, published):
    error = _refused(client, published.solar.slug, tools=[_tool(parameters=_nested(200))])
    assert error["param"] == "tools[0].function.parameters" and error["code"] == "too_large"
    assert f"more than {MAX_SCHEMA_DEPTH} levels" in error["message"]
    answer = client.chat.completions.create(model=published.solar.slug, messages=ASKED,
                                            tools=[_tool(parameters=_nested(MAX_SCHEMA_DEPTH))])  # fmt: skip
    assert answer.choices[0].message.content


def test_finding_a_tool_schema_that_is_not_a_json_schema_is_refused(client, published):
    error = _refused(client, published.solar.slug, tools=[_tool(), _tool("second", {"type": 12})])
    assert error["param"] == "tools[1].function.parameters" and error["code"] == "invalid_schema"
    assert "not valid" in error["message"]


def test_finding_a_tool_name_outside_openais_characters_is_refused(client, published):
    for name in ("lookup\n", "a" * 65, "名字", ""):
        assert _refused(client, published.solar.slug, tools=[_tool(name)])["param"] == "tools[0]", name
    answer = client.chat.completions.create(model=published.solar.slug, messages=ASKED, tools=[_tool("a-Z_9" * 12)])
    assert answer.choices[0].message.content


def test_finding_a_tool_description_of_a_megabyte_is_refused(client, published):
    error = _refused(client, published.solar.slug, tools=[_tool(description="d" * MEGABYTE)])
    assert error["param"] == "tools[0].function.description"
    assert f"longer than {MAX_TOOL_DESCRIPTION_CHARS}" in error["message"]


def test_finding_many_tools_each_within_bounds_are_refused_together_over_theirs(client, published):
    each = _wide(MAX_SCHEMA_CHARS - 1000)
    tools = [_tool(f"tool_{n}", each) for n in range(MAX_TOOLS_CHARS // MAX_SCHEMA_CHARS + 1)]
    error = _refused(client, published.solar.slug, tools=tools)
    assert error["param"] == "tools" and f"at most {MAX_TOOLS_CHARS}" in error["message"]


def test_finding_a_stop_string_of_a_megabyte_is_refused(client, published, scripted_llm):
    error = _refused(client, published.solar.slug, stop=["end", "s" * MEGABYTE])
    assert error["param"] == "stop" and f"stop[1] is longer than {MAX_STOP_CHARS}" in error["message"]
    assert _refused(client, published.solar.slug, stop="s" * (MAX_STOP_CHARS + 1))["param"] == "stop"
    assert _refused(client, published.solar.slug, stop=["a", "b", "c", "d", "e"])["param"] == "stop"
    client.chat.completions.create(model=published.solar.slug, messages=ASKED, stop=["s" * MAX_STOP_CHARS])
    assert scripted_llm.requests()[-1]["body"]["stop"] == ["s" * MAX_STOP_CHARS]


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_finding_max_tokens_of_2_to_the_63_is_refused(client, published, scripted_llm, field):
    for value in (2**63, 128_001, 0):
        error = _refused(client, published.solar.slug, **{field: value})
        assert error["param"] == field and error["code"] == "invalid_value"
        assert "from 1 to 128000" in error["message"], error["message"]
    client.chat.completions.create(model=published.solar.slug, messages=ASKED, **{field: 128_000})
    assert scripted_llm.requests()[-1]["body"]["max_tokens"] == 128_000


def test_finding_a_seed_beyond_64_bits_is_refused(client, published, scripted_llm):
    for value in (INT64_MAX + 1, INT64_MIN - 1, 10**30):
        assert _refused(client, published.solar.slug, seed=value)["param"] == "seed"
    for value in (INT64_MIN, INT64_MAX):
        client.chat.completions.create(model=published.solar.slug, messages=ASKED, seed=value)
        assert scripted_llm.requests()[-1]["body"]["seed"] == value


def test_finding_n_of_2_to_the_63_is_refused_as_out_of_range(client, published):
    error = _refused(client, published.solar.slug, n=2**63)
    assert error["param"] == "n" and error["code"] == "invalid_value" and "from 1 to 128" in error["message"]
    assert _refused(client, published.solar.slug, n=2)["code"] == "unsupported_value"  # one choice per request


def test_finding_a_response_format_schema_is_bounded_as_a_tools_is(client, published):
    def schema_format(schema: dict, name: str = "answer") -> dict:
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}

    deep = _refused(client, published.solar.slug, response_format=schema_format(_nested(200)))
    large = _refused(client, published.solar.slug, response_format=schema_format(_wide(MEGABYTE)))
    for error in (deep, large):
        assert error["param"] == "response_format.json_schema.schema" and error["code"] == "too_large"
    named = _refused(client, published.solar.slug, response_format=schema_format({"type": "object"}, "n" * MEGABYTE))
    assert named["param"] == "response_format.json_schema.name"


@pytest.mark.parametrize("where", ["metadata", "header"])
def test_finding_a_conversation_id_of_superscript_digits_is_a_400_not_a_500(server, published, tenant_admin,
                                                                           make_key, where):  # fmt: skip
    # "²" is a digit to str.isdigit() but not to int(), which raised ValueError: a 500.
    _key, secret = make_key(tenant_admin)
    before = _conversations()
    body = {"model": published.solar.slug, "messages": ASKED}
    headers = {"Authorization": f"Bearer {secret}", "Accept-Language": "en"}
    if where == "metadata":
        body["metadata"] = {"conversation_id": "1²"}
    else:
        headers["X-Conversation-Id"] = "1²".encode("latin-1")
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=headers, timeout=20)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "metadata.conversation_id" and error["code"] == "invalid_conversation"
    assert _conversations() == before

"""The offline demo model with an agent's real tools: a message that names a tool by its label (Chinese or English),
its name or words of its description calls it, with arguments read from the message by the tool's schema; it
honours tool_choice, answers JSON mode with an object that fits the request, and answers in the conversation's
language after a tool result. The MCP tools are the sample server's (scripts/sample_mcp_server.py), as the `mcp`
package lists them."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from agents.tools.registry import get_tool
from llm.demo import demo_engine

SAMPLE = Path(__file__).resolve().parents[2] / "scripts" / "sample_mcp_server.py"
WEATHER, CONVERT = "mcp__sample__weather", "mcp__sample__convert_units"


def sample_server_module():
    """scripts/sample_mcp_server.py, imported from its file (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("sample_mcp_server", SAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sample_tools() -> list[dict]:
    """The sample server's tools as the platform offers them to a model (mcp__<short name>__<tool>)."""
    listed = asyncio.run(sample_server_module().build_server().list_tools())
    return [
        {
            "type": "function",
            "function": {"name": f"mcp__sample__{tool.name}", "description": tool.description,
                         "parameters": tool.input_schema},
        }
        for tool in listed
    ]  # fmt: skip


def answer(messages: list[dict], **request) -> dict:
    plan = demo_engine().plan({"model": "demo-scripted", "messages": messages, **request})
    return plan.completion["choices"][0]["message"]


def call_of(message: dict) -> tuple[str, dict]:
    (call,) = message["tool_calls"]
    return call["function"]["name"], json.loads(call["function"]["arguments"])


def user(text: str) -> list[dict]:
    return [{"role": "system", "content": "你是一个乐于助人的助手。"}, {"role": "user", "content": text}]


def has_chinese(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)


@pytest.mark.parametrize(
    ("text", "arguments"),
    [
        ("北京今天天气怎么样？", {"city": "beijing"}),
        ("What's the weather like in London?", {"city": "london"}),
        ("杭州会下雨吗？查一下天气", {"city": "hangzhou"}),
    ],
)
def test_words_of_a_description_call_that_tool_with_arguments_from_the_message(sample_tools, text, arguments):
    assert call_of(answer(user(text), tools=sample_tools)) == (WEATHER, arguments)


@pytest.mark.parametrize(
    ("text", "arguments"),
    [
        ("100 华氏度是多少摄氏度？", {"value": 100, "from_unit": "f", "to_unit": "c"}),
        ("帮我把 42.195 公里换算成英里", {"value": 42.195, "from_unit": "km", "to_unit": "mi"}),
        ("Convert 10 pounds to kg", {"value": 10, "from_unit": "lb", "to_unit": "kg"}),
    ],
)
def test_enum_values_are_read_in_the_order_the_message_says_them(sample_tools, text, arguments):
    assert call_of(answer(user(text), tools=sample_tools)) == (CONVERT, arguments)


def test_enum_values_keep_the_messages_order_when_the_schema_came_back_from_jsonb(sample_tools):
    """PostgreSQL's jsonb gives an object's keys back shortest first: the stored schema lists to_unit before
    from_unit. The required list (a JSON array keeps its order) says which property comes first."""

    def as_jsonb(value):
        if isinstance(value, dict):
            return {key: as_jsonb(value[key]) for key in sorted(value, key=lambda key: (len(key), key))}
        return [as_jsonb(item) for item in value] if isinstance(value, list) else value

    stored = as_jsonb(sample_tools)
    convert = next(tool for tool in stored if tool["function"]["name"] == CONVERT)
    assert list(convert["function"]["parameters"]["properties"])[:2] == ["value", "to_unit"]
    name, arguments = call_of(answer(user("100 华氏度是多少摄氏度？"), tools=stored))
    assert (name, arguments) == (CONVERT, {"value": 100, "from_unit": "f", "to_unit": "c"})


def test_a_tool_named_by_its_label_in_chinese_or_english_is_called(sample_tools):
    """The labels are the ones pages show (Tool.label_zh / label_en), not in the request: the agents app gives them
    to the demo model. The description alone would not say it (no word of it is in the message)."""
    knowledge, http = get_tool("plugin_ai_knowledge_base_query"), get_tool("http_request")
    tools = [knowledge.openai_schema("en"), http.openai_schema("en"), *sample_tools]
    name, arguments = call_of(answer(user("用知识库检索：退货政策"), tools=tools))
    assert name == "plugin_ai_knowledge_base_query" and arguments["query"] == "用知识库检索：退货政策"
    assert call_of(answer(user("Please do an HTTP request for me"), tools=tools))[0] == "http_request"
    assert call_of(answer(user("试试 HTTP 请求"), tools=tools))[0] == "http_request"


def test_a_tool_named_by_its_name_is_called_and_an_unnamed_one_is_not(sample_tools):
    assert call_of(answer(user("convert_units value: 3, from_unit: kg, to_unit: lb"), tools=sample_tools)) == (
        CONVERT,
        {"value": 3, "from_unit": "kg", "to_unit": "lb"},
    )
    # What used to call the missing `demo_tool`: a weather word to an agent whose tools are not about weather.
    menu = [get_tool("http_request").openai_schema("zh-hans")]
    reply = answer(user("今天天气怎么样？"), tools=menu)
    assert "tool_calls" not in reply and reply["content"].startswith("（演示模型，离线脚本）")
    assert "tool_calls" not in answer(user("hello there"), tools=sample_tools)


def test_tool_choice_none_required_and_named(sample_tools):
    none = answer(user("北京今天天气怎么样？"), tools=sample_tools, tool_choice="none")
    assert "tool_calls" not in none and has_chinese(none["content"])
    english = answer(user("What's the weather in Beijing?"), tools=sample_tools, tool_choice="none")
    assert "tool_calls" not in english and not has_chinese(english["content"])
    required = answer(user("上海呢？天气如何"), tools=sample_tools, tool_choice="required")
    assert call_of(required) == (WEATHER, {"city": "shanghai"})
    assert (
        call_of(answer(user("嗯"), tools=sample_tools, tool_choice="required"))[0]
        == sample_tools[0]["function"]["name"]
    )  # nothing named: the first tool
    # A rule of the script that calls its own tool (the energy planner's) gives way too.
    planner = [{"role": "system", "content": "你是能源规划师。"}, {"role": "user", "content": "帮我生成一份光伏报告"}]
    list_agents = [{"type": "function", "function": {"name": "list_agents", "parameters": {"type": "object"}}}]
    assert call_of(answer(planner, tools=list_agents))[0] == "list_agents"
    assert "tool_calls" not in answer(planner, tools=list_agents, tool_choice="none")
    forced = {"type": "function", "function": {"name": CONVERT}}
    assert call_of(answer(user("北京 20 摄氏度是多少华氏度"), tools=sample_tools, tool_choice=forced)) == (
        CONVERT,
        {"value": 20, "from_unit": "c", "to_unit": "f"},
    )


def tool_round(question: str, result: str, tools: list[dict]) -> list[dict]:
    call = answer(user(question), tools=tools)["tool_calls"][0]
    return [*user(question), {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": result}]  # fmt: skip


def test_after_a_tool_result_it_answers_in_the_conversations_language(sample_tools):
    chinese = answer(tool_round("100 华氏度是多少摄氏度？", "5", sample_tools), tools=sample_tools)
    assert chinese["content"] == "工具已返回结果（演示模型）：\n\n5" and "tool_calls" not in chinese
    weather = "北京 / Beijing：晴 / sunny，-2～8 °C"
    english = answer(tool_round("What's the weather in Beijing?", weather, sample_tools), tools=sample_tools)
    assert english["content"] == f"The tool returned its result (demo model):\n\n{weather}"


def test_json_mode_answers_an_object_that_fits_the_request(sample_tools):
    json_mode = {"response_format": {"type": "json_object"}}
    fields = answer(user("用 JSON 回答，字段：city、weather。city: 北京, weather: 晴"), **json_mode)
    assert json.loads(fields["content"]) == {"city": "北京", "weather": "晴"}
    english = answer(user("Reply in JSON with the keys name and age. name: Ada, age: 36"), **json_mode)
    assert json.loads(english["content"]) == {"name": "Ada", "age": 36}
    template = answer(user('Answer as {"answer": …, "language": …}. language: en'), **json_mode)
    assert set(json.loads(template["content"])) == {"answer", "language"}
    assert json.loads(template["content"])["language"] == "en"
    pairs = answer(user("保存这位客人：name: 王芳, seats: 4"), **json_mode)
    assert json.loads(pairs["content"]) == {"name": "王芳", "seats": 4}
    # After a tool whose result is an object, the object; keys asked for are taken from it.
    result = json.dumps({"city": "北京", "sky": "晴", "high_c": 8}, ensure_ascii=False)
    after = answer(tool_round("北京天气怎么样？用 JSON", result, sample_tools), tools=sample_tools, **json_mode)
    assert json.loads(after["content"]) == {"city": "北京", "sky": "晴", "high_c": 8}
    picked = tool_round("北京天气怎么样？JSON 字段为city和high_c", result, sample_tools)
    assert json.loads(answer(picked, tools=sample_tools, **json_mode)["content"]) == {"city": "北京", "high_c": 8}
    # Nothing to go by: the reply wrapped, still an object.
    assert set(json.loads(answer(user("你好"), **json_mode)["content"])) == {"reply"}

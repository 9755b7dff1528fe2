"""Seed 1's to_sys / to_user text protocol, for a model flagged as lacking function calling."""

import asyncio
import json

import pytest

from agents import textprotocol
from agents.services import agent_create, conversation_start
from agents.tools import get_tool
from core.db import database_sync_to_async
from memory.models import Message
from tenants.scope import tenant_scope
from tests.agents.test_toolloop import RUNS
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)

ROLE = "你是天气播报员。"


async def _turn(tenant, conversation, text):
    _user, reply, sink = await user_turn(tenant, conversation, text)
    return reply, sink


@pytest.fixture(autouse=True)
def _clean():
    RUNS.clear()


@pytest.fixture
def make_conversation(tenant, member, scripted_llm):
    def _make():
        with tenant_scope(tenant):
            ModelProviderFactory(
                tenant=tenant, name="textual", base_url=scripted_llm.base_url, is_default=True, max_retries=0,
                chat_models=[{"name": "gpt-4", "context_window": 8192, "function_calling": False}],
            )  # fmt: skip
            agent = agent_create(tenant=tenant, name="Weather", system_prompt=ROLE, model="gpt-4",
                                 token_overflow_config={"strategy": "none"})  # fmt: skip
            agent.tools = ["tl_weather", "tl_forecast"]
            agent.full_clean()
            agent.save()
            return conversation_start(agent=agent, user=member)

    return database_sync_to_async(_make)


async def _bodies(scripted_llm):
    return [r["body"] for r in await asyncio.to_thread(scripted_llm.requests)]


def _messages(tenant, conversation):
    with tenant_scope(tenant):
        return list(Message.objects.filter(conversation=conversation).order_by("id"))


def to_sys(**arguments):
    return "to_sys: " + json.dumps({"app": "tl_weather", **arguments}, ensure_ascii=False)


def test_the_prompt_follows_seed_1():
    prompt = textprotocol.system_prompt(role=ROLE, tools=[get_tool("tl_weather")], language="zh-hans")
    for marker in (
        "现在有3个角色",
        "to_sys: 应用程序参数",
        "to_user: 回复的消息",
        "规则：",
        "反例：",
        "[应用程序列表如下]",
    ):
        assert marker in prompt
    assert "1，tl_weather，查询城市天气。" in prompt and "city（City name）（必填）" in prompt
    assert '"app" : "tl_weather", #应用名字（必填）' in prompt and ROLE in prompt


def test_parse_reply():
    assert textprotocol.parse_reply("to_user: 你好").text == "你好"
    parsed = textprotocol.parse_reply('to_sys: {"app": "tl_weather", "city": "成都"} 等待')
    assert (parsed.kind, parsed.app, parsed.arguments) == ("sys", "tl_weather", {"city": "成都"})
    assert textprotocol.parse_reply(to_sys() + "\nto_user: 好的").repair_prompt == textprotocol.REPAIR_BOTH
    assert textprotocol.parse_reply(to_sys() + "\nsys: 已完成").repair_prompt == textprotocol.REPAIR_INVENTED_SYS
    assert textprotocol.parse_reply("to_sys: 天气").kind == "bad_json"
    assert textprotocol.parse_reply("plain answer").text == "plain answer"


async def test_to_sys_runs_the_tool_and_the_sys_result_is_worded_by_the_model(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules(
        {"when": {"last_message": "sys:"}, "reply": {"text": "to_user: 成都今天晴。"}},
        {"when": {}, "reply": {"text": to_sys(city="成都")}},
    )
    conversation = await make_conversation()
    reply, sink = await _turn(tenant, conversation, "成都天气怎么样？")

    assert RUNS == [("tl_weather", {"city": "成都", "days": 1, "context": {}})]
    assert reply.content == "成都今天晴。" and "".join(f["content"] for f in sink.of("delta")) == "成都今天晴。"
    assert [t["status"] for t in sink.of("tool")] == ["started", "completed"]
    first, second = await _bodies(scripted_llm)
    assert "tools" not in first
    system = first["messages"][0]
    assert [m["role"] for m in first["messages"]].count("system") == 1 and system["role"] == "system"
    assert "[应用程序列表如下]" in system["content"] and ROLE in system["content"]
    assert first["messages"][-1] == {"role": "user", "content": "user:成都天气怎么样？"}
    assert second["messages"][-1] == {"role": "user", "content": "sys:Sunny in 成都"}
    rows = await database_sync_to_async(_messages)(tenant, conversation)
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[1].tool_calls[0]["function"]["name"] == "tl_weather"
    assert rows[2].tool_call_id == rows[1].tool_calls[0]["id"] and rows[2].tool_call_id.startswith("call_txt_")

    # The next turn sends the stored history in the protocol's text.
    scripted_llm.set_rules({"when": {}, "reply": {"text": "to_user: 不客气"}})
    await _turn(tenant, conversation, "谢谢")
    third = (await _bodies(scripted_llm))[-1]
    history = [(m["role"], m["content"]) for m in third["messages"][1:]]
    assert history == [
        ("user", "user:成都天气怎么样？"),
        ("assistant", 'to_sys: {"app": "tl_weather", "city": "成都"}'),
        ("user", "sys:Sunny in 成都"),
        ("assistant", "to_user: 成都今天晴。"),
        ("user", "user:谢谢"),
    ]


async def test_both_markers_get_the_seed_repair_prompt(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules(
        {"when": {"last_message": "sys:Sunny"}, "reply": {"text": "to_user: 晴天"}},
        {"when": {"last_message": "两者只能选一个"}, "reply": {"text": to_sys(city="北京")}},
        {"when": {}, "reply": {"text": to_sys(city="北京") + "\n\nto_user: 好的，马上查询"}},
    )
    conversation = await make_conversation()
    reply, _sink = await _turn(tenant, conversation, "北京天气")
    bodies = await _bodies(scripted_llm)
    assert bodies[1]["messages"][-1] == {"role": "user", "content": "sys:" + textprotocol.REPAIR_BOTH}
    assert RUNS == [("tl_weather", {"city": "北京", "days": 1, "context": {}})] and reply.content == "晴天"


async def test_an_invented_sys_line_gets_the_seed_repair_prompt(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules(
        {"when": {"last_message": "sys:Sunny"}, "reply": {"text": "to_user: 晴天"}},
        {"when": {"last_message": "只回复to_sys的数据"}, "reply": {"text": to_sys(city="上海")}},
        {"when": {}, "reply": {"text": to_sys(city="上海") + "\nsys: 上海晴"}},
    )
    conversation = await make_conversation()
    await _turn(tenant, conversation, "上海天气")
    bodies = await _bodies(scripted_llm)
    assert bodies[1]["messages"][-1] == {"role": "user", "content": "sys:" + textprotocol.REPAIR_INVENTED_SYS}
    assert [run[1]["city"] for run in RUNS] == ["上海"]


async def test_the_repair_limit_ends_the_turn(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": to_sys(city="西安") + "\nto_user: 好"}})
    conversation = await make_conversation()
    reply, sink = await _turn(tenant, conversation, "西安天气")
    assert len(await _bodies(scripted_llm)) == 1 + textprotocol.REPAIR_LIMIT
    assert RUNS == [] and "reply protocol" in reply.content and sink.frames[-1]["type"] == "done"


async def test_invalid_arguments_go_back_as_a_sys_message(tenant, make_conversation, scripted_llm):
    scripted_llm.set_rules(
        {"when": {"last_message": "sys:Error"}, "reply": {"text": "to_user: 请问是哪个城市？"}},
        {"when": {}, "reply": {"text": to_sys(days=2)}},
    )
    conversation = await make_conversation()
    reply, _sink = await _turn(tenant, conversation, "天气")
    bodies = await _bodies(scripted_llm)
    assert RUNS == [] and "'city' is a required property" in bodies[1]["messages"][-1]["content"]
    assert reply.content == "请问是哪个城市？"

"""The script engine shared by the fake server and the demo model."""

import json

from llm.demo import demo_engine
from llm.script import ErrorPlan, ScriptEngine, embed, split_text, text_of_tokens
from llm.tokens import count_text


def plan_text(engine, messages, **request):
    plan = engine.plan({"model": "scripted", "messages": messages, **request})
    return plan.completion["choices"][0]["message"]


def test_rules_match_last_message_tool_results_and_system_prompt():
    engine = ScriptEngine(
        {
            "rules": [
                {"when": {"has_tool_results": True}, "reply": {"text": "tool said {last_message}"}},
                {"when": {"system_prompt": "summarise"}, "reply": {"text": "summary"}},
                {
                    "when": {"last_message": {"regex": "^weather"}},
                    "reply": {"tool_calls": [{"name": "w", "arguments": {"c": 1}}]},
                },
                {"when": {}, "reply": {"text": "echo {last_message}"}},
            ]
        }
    )
    assert plan_text(engine, [{"role": "user", "content": "hi"}])["content"] == "echo hi"
    assert (
        plan_text(engine, [{"role": "system", "content": "Please summarise."}, {"role": "user", "content": "x"}])[
            "content"
        ]
        == "summary"
    )
    call = plan_text(engine, [{"role": "user", "content": "weather in Rome"}])["tool_calls"][0]
    assert call["function"] == {"name": "w", "arguments": '{"c": 1}'}
    after_tool = [
        {"role": "user", "content": "weather"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
    ]
    assert plan_text(engine, after_tool)["content"] == "tool said sunny"


def test_times_limits_a_rule_and_load_resets_it():
    script = {
        "rules": [{"when": {}, "times": 1, "reply": {"error": {"status": 429}}}, {"when": {}, "reply": {"text": "ok"}}]
    }
    engine = ScriptEngine(script)
    request = {"messages": [{"role": "user", "content": "x"}]}
    assert isinstance(engine.plan(request), ErrorPlan)
    assert not isinstance(engine.plan(request), ErrorPlan)
    engine.load(script)
    assert isinstance(engine.plan(request), ErrorPlan)


def test_token_chunks_keep_chinese_characters_whole():
    pieces = split_text("你好，世界 hello", 0, "gpt-4")
    assert "".join(pieces) == "你好，世界 hello"
    assert all("\ufffd" not in piece for piece in pieces)


def test_generated_text_has_exactly_the_tokens_asked_for():
    assert count_text(text_of_tokens(500)) == 500


def test_embeddings_are_deterministic_and_similar_texts_are_close():
    def cosine(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert embed("麻婆豆腐很辣") == embed("麻婆豆腐很辣")
    assert cosine(embed("spicy tofu dish"), embed("spicy tofu dishes")) > cosine(
        embed("spicy tofu dish"), embed("quarterly revenue report")
    )


def test_demo_script_answers_in_the_users_language():
    engine = demo_engine()
    assert "演示模型" in plan_text(engine, [{"role": "user", "content": "你好"}])["content"]
    assert "demo model" in plan_text(engine, [{"role": "user", "content": "hello"}])["content"]
    assert "帮我查一下" in plan_text(engine, [{"role": "user", "content": "帮我查一下订单"}])["content"]


def test_the_demo_models_bilingual_answers_now_follow_the_language():
    """Issue 18 item 4: the planner's final message, a summary, a plan, a tool's echo come in one language, the
    message's; the Chinese ones name the admin path as the page does (管理后台 › 模型服务商)."""
    engine = demo_engine()
    summary = "Summarise the results of the plan's steps for the user, in the user's language."

    def final(query):
        payload = json.dumps({"userQuery": query, "steps": [{"agentName": "报告生成 / Report"}]}, ensure_ascii=False)
        return plan_text(engine, [{"role": "system", "content": summary}, {"role": "user", "content": payload}])

    assert final("帮我生成一份光伏经济测算报告")["content"] == (
        "光伏经济测算报告已完成（演示模型）：光伏经济性测算、敏感性分析和报告生成三步都已执行，报告可在“报告生成”步骤中打开。"
    )
    assert final("Make me a PV economics report")["content"].startswith("The PV economics report is ready")
    for system in ("Summarise the conversation.", "You are a planner."):
        zh = plan_text(engine, [{"role": "system", "content": system}, {"role": "user", "content": "你们聊了什么"}])
        en = plan_text(engine, [{"role": "system", "content": system}, {"role": "user", "content": "what was said"}])
        assert not any(c.isascii() and c.isalpha() for c in zh["content"]), zh["content"]
        assert not any("\u4e00" <= c <= "\u9fff" for c in en["content"]), en["content"]
    assert "“管理后台 › 模型服务商”" in plan_text(engine, [{"role": "user", "content": "你好"}])["content"]


def test_regex_named_groups_fill_the_text_and_the_tool_call_arguments():
    engine = ScriptEngine(
        {
            "rules": [
                {
                    "when": {
                        "last_message": {"regex": r"(?P<quantity>\d+|[一二两三四五六七八九十]+)个(?P<dish>\w+?)$"}
                    },
                    "reply": {
                        "text": "{dish}?",
                        "tool_calls": [
                            {"name": "order", "arguments": {"dish": "{dish}", "quantity": "{quantity:int}", "n": 1}}
                        ],
                    },
                },
            ]
        }
    )
    message = plan_text(engine, [{"role": "user", "content": "来两个包子"}])
    assert message["content"] == "包子?"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"dish": "包子", "quantity": 2, "n": 1}
    arguments = plan_text(engine, [{"role": "user", "content": "来12个饺子"}])["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments)["quantity"] == 12
    arguments = plan_text(engine, [{"role": "user", "content": "来十五个饺子"}])["tool_calls"][0]["function"][
        "arguments"
    ]
    assert json.loads(arguments)["quantity"] == 15


# --- the conventions: client tools, response_format, max_tokens and stop -------------------------------------------

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"}},
        },
    },
}
ECHO = {"rules": [{"when": {}, "reply": {"text": "echo {last_message}"}}]}


def test_a_named_or_forced_tool_is_called_with_arguments_from_the_message():
    engine = ScriptEngine(ECHO)
    said = [{"role": "user", "content": "Please use the tool lookup, city: Oslo, days: 3, metric: yes"}]
    call = plan_text(engine, said, tools=[LOOKUP])["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo", "days": 3, "metric": True}
    plain = [{"role": "user", "content": "city: Oslo"}]
    assert plan_text(engine, plain, tools=[LOOKUP])["content"] == "echo city: Oslo"  # offered, not asked for
    forced = plan_text(engine, plain, tools=[LOOKUP], tool_choice={"type": "function", "function": {"name": "lookup"}})
    assert json.loads(forced["tool_calls"][0]["function"]["arguments"])["city"] == "Oslo"
    assert plan_text(engine, plain, tools=[LOOKUP], tool_choice="required")["tool_calls"]
    assert "tool_calls" not in plan_text(engine, said, tools=[LOOKUP], tool_choice="none")
    result = {"role": "tool", "tool_call_id": "x", "content": "7"}
    results = [*said, {"role": "assistant", "tool_calls": [call]}, result]
    assert plan_text(engine, results, tools=[LOOKUP])["content"] == "echo 7"  # after the results: an answer
    raw = ScriptEngine({"rules": [{"when": {}, "reply": {"text": "no", "raw": True}}]})
    assert plan_text(raw, said, tools=[LOOKUP])["content"] == "no"


def test_response_format_gets_json_and_the_same_request_the_same_answer():
    engine = ScriptEngine(ECHO)
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
                       "pet": {"$ref": "#/$defs/Pet"}, "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "$defs": {"Pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}}}},
    }  # fmt: skip
    request = {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}}
    said = [{"role": "user", "content": "name: Ada, tags: a|b, kind: dog"}]
    answer = plan_text(engine, said, **request)["content"]
    assert json.loads(answer) == {"name": "Ada", "tags": ["a", "b"], "pet": {"kind": "dog"}, "note": said[0]["content"]}
    assert plan_text(engine, said, **request)["content"] == answer
    wrapped = plan_text(engine, [{"role": "user", "content": 'a "quote"'}], response_format={"type": "json_object"})
    assert json.loads(wrapped["content"]) == {"reply": 'echo a "quote"'}


def test_max_tokens_and_stop_cut_the_text():
    engine = ScriptEngine({"rules": [{"when": {}, "reply": {"text_tokens": 30}}]})
    plan = engine.plan({"model": "scripted", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4})
    choice = plan.completion["choices"][0]
    assert choice["finish_reason"] == "length" and count_text(choice["message"]["content"], "gpt-4") == 4
    assert plan.chunks[-1]["choices"][0]["finish_reason"] == "length"
    stopped = ScriptEngine({"rules": [{"when": {}, "reply": {"text": "one. two. three."}}]})
    plan = stopped.plan({"model": "scripted", "messages": [{"role": "user", "content": "x"}], "stop": [" two"]})
    assert plan.completion["choices"][0]["message"]["content"] == "one."
    assert plan.completion["choices"][0]["finish_reason"] == "stop"

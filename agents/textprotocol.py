# ruff: noqa: E501  (the prompt follows seed 1 line by line; CJK characters count double)
"""Seed 1's text protocol, for models without function calling (A3): `to_sys:` / `to_user:`.

The system prompt (in Chinese, as in the seed) names three roles (sys, user, the assistant), the rules, a
counter-example and the application list with each application's parameters and a JSON example. The model answers
either `to_sys: {"app": "<tool>", ...arguments}` (the platform runs the tool and answers with a `sys:` message) or
`to_user: <reply>`. When it answers both at once, or invents the system's `sys:` answer itself, the seed's repair
prompts ask it again (at most REPAIR_LIMIT times per model reply).

Stored history stays in the OpenAI form (assistant `tool_calls` + `tool` messages), so overflow works the same;
`to_text_messages` turns it into the protocol's text before it is sent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llm.messages import ChatMessage, Role

if TYPE_CHECKING:
    from agents.tools import Tool

TO_SYS = "to_sys:"
TO_USER = "to_user:"
SYS = "sys:"
REPAIR_LIMIT = 2

# The seed's repair prompts, sent as `sys:` messages.
REPAIR_BOTH = "请不要同时回复to_user 和 to_sys, 两者只能选一个，也不要[等待系统回复]这样的说明"
REPAIR_INVENTED_SYS = "请不要同时回复to_sys 和 sys, 只回复to_sys的数据"
REPAIR_BAD_JSON = "to_sys 后面必须是一个json对象，例如 {'app': '应用名字'}，请重新回复"

PROMPT = """现在有3个角色，sys 代表应用程序系统，user 代表用户，你的角色是下面[角色设定]里描述的助理，你的目的是服务用户，\
请你根据上下文决定是否调用 sys应用程序系统。
调用系统则输出 to_sys: 应用程序参数
回复用户则输出 to_user: 回复的消息

规则：
1，要一句一句的和我沟通，每次只能选择和to_sys或to_user其中之一，我会代为转达和处理消息，并且用sys 或 user开头的消息回复你
2，调用程序的具体参数要在上下文中确定，比如我们应用程序有个参数a，上下文里用户或系统没有提供，你就不能擅自决定a的具体数值，\
调用程序用json格式
3，当我用sys：开头给你回复的时候，表示本次应用程序返回，你要结合这个返回信息继续和用户沟通，你直接用to_user和用户沟通，\
要注意影藏程序系统这个信息，让用户感知不到

反例：
1，类似下面的回复是错误的，错误原因是在消息里同时出现to_sys 和 to_user
\"\"\"
to_sys: {
"app" : "{example_app}",
{example_args}
}

to_user: 好的，已经为您办好了，请稍等片刻。还需要其他帮助吗？
\"\"\"

[应用程序列表如下]
{apps}

[角色设定]
{role}

接下来用to_user回复用户的消息"""


def _example_value(name: str, schema: dict[str, Any]) -> Any:
    if schema.get("examples"):
        return schema["examples"][0]
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    return {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}.get(kind, f"<{name}>")


def app_example(tool: Tool) -> dict[str, Any]:
    """The JSON a `to_sys:` call of `tool` looks like: the application name, then every parameter."""
    properties = (tool.parameters or {}).get("properties") or {}
    return {"app": tool.name, **{name: _example_value(name, spec) for name, spec in properties.items()}}


def _app_entry(number: int, tool: Tool, language: str) -> str:
    parameters = tool.parameters or {}
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    if properties:
        names = []
        for name, spec in properties.items():
            label = name + (f"（{spec['description']}）" if spec.get("description") else "")
            names.append(label + ("（必填）" if name in required else ""))
        wanted = "请你和用户沟通确定这些参数：" + "，".join(names)
    else:
        wanted = "参数：无"
    lines = [f'    "app" : {json.dumps(tool.name, ensure_ascii=False)}, #应用名字（必填）']
    for name, value in list(app_example(tool).items())[1:]:
        spec = properties.get(name) or {}
        note = spec.get("description") or name
        lines.append(f"    {json.dumps(name)} : {json.dumps(value, ensure_ascii=False)}, #{note}")
    example = "{\n" + "\n".join(lines) + "\n}"
    return f"{number}，{tool.name}，{tool.description(language)}\n{wanted}\n输出json格式例子：{example}"


def system_prompt(*, role: str, tools: list[Tool], language: str = "zh-hans") -> str:
    """Seed 1's prompt: the roles, the rules, the counter-example, the application list, then the agent's role."""
    apps = "\n".join(_app_entry(number, tool, language) for number, tool in enumerate(tools, start=1))
    first = app_example(tools[0]) if tools else {"app": "app"}
    example_args = ",\n".join(
        f"{json.dumps(k, ensure_ascii=False)} : {json.dumps(v, ensure_ascii=False)}"
        for k, v in first.items()
        if k != "app"
    )
    return (
        PROMPT.replace("{example_app}", str(first["app"]))
        .replace("{example_args}", example_args)
        .replace("{apps}", apps or "（无）")
        .replace("{role}", role.strip() or "一名乐于助人的助理")
    )


@dataclass
class Parsed:
    """One model reply read by the protocol. kind: user, sys, both, invented_sys or bad_json."""

    kind: str
    text: str = ""
    app: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    raw_arguments: str = ""

    @property
    def repair_prompt(self) -> str:
        return {"both": REPAIR_BOTH, "invented_sys": REPAIR_INVENTED_SYS, "bad_json": REPAIR_BAD_JSON}.get(
            self.kind, ""
        )


def _normalise(text: str) -> str:
    return text.replace("to_sys：", TO_SYS).replace("to_user：", TO_USER)


def parse_reply(text: str) -> Parsed:
    """Read a reply the way the seed's deal_answer does (plus: plain text without a marker is for the user)."""
    answer = _normalise(text).strip()
    lower = answer.lower()
    has_sys, has_user = TO_SYS in lower, TO_USER in lower
    if has_sys and has_user:
        return Parsed("both")
    if has_sys and ("\nsys:" in lower or "\nsys：" in lower):
        return Parsed("invented_sys")
    if has_sys:
        body = answer[lower.index(TO_SYS) + len(TO_SYS) :].strip()
        start = body.find("{")
        if start < 0:
            return Parsed("bad_json", raw_arguments=body)
        try:
            value, _end = json.JSONDecoder().raw_decode(body[start:].replace("‘", '"').replace("’", '"'))
        except ValueError:
            return Parsed("bad_json", raw_arguments=body)
        if not isinstance(value, dict) or not isinstance(value.get("app"), str):
            return Parsed("bad_json", raw_arguments=body)
        app = value.pop("app")
        return Parsed("sys", app=app, arguments=value, raw_arguments=json.dumps(value, ensure_ascii=False))
    if lower.startswith(TO_USER):
        return Parsed("user", text=answer[len(TO_USER) :].strip())
    return Parsed("user", text=answer)


def sys_message(content: str) -> ChatMessage:
    """What the platform tells the model, as the seed does: a user message starting with `sys:`."""
    return ChatMessage.user(SYS + content)


def to_text_messages(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Stored history as the protocol's text: tool calls become `to_sys:` replies, tool results `sys:` messages,
    other assistant replies `to_user:` replies, user messages `user:` messages (the system one stays)."""
    result: list[ChatMessage] = []
    for message in messages:
        role, content = message.role, message.text
        if role == Role.ASSISTANT and message.tool_calls:
            for call in message.tool_calls:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                data = {"app": function.get("name", ""), **(arguments if isinstance(arguments, dict) else {})}
                result.append(ChatMessage.assistant(TO_SYS + " " + json.dumps(data, ensure_ascii=False)))
        elif role == Role.ASSISTANT:
            result.append(ChatMessage.assistant(TO_USER + " " + content))
        elif role == Role.TOOL:
            result.append(sys_message(content))
        elif role == Role.USER and not content.startswith(SYS):
            result.append(ChatMessage.user("user:" + content))
        else:
            result.append(message)
    return result

"""The registered Python functions and plugins seed 1's two example workflows (the restaurant pack's templates) use.

Small, deterministic implementations. `plugin_ai_knowledge_base_query` is the platform's knowledge-base plugin
(agents/tools/knowledge.py), in no pack. The customer list is demo data, and `plugin_sms_send`
sends nothing (no SMS gateway is configured): it checks the message and records it in the tool context.
"""

from __future__ import annotations

import re
from typing import Any

from agents.packs.restaurant import PACK
from agents.tools import ToolCallContext, ToolResult, python_tool

SPICY_WORDS = ("辣", "麻", "椒", "spicy", "chili", "chilli", "hot", "pepper", "sichuan", "szechuan")

DEMO_CUSTOMERS = [
    {"name": "王女士", "mobile": "13800000001", "tags": ["潜在客户", "prospect"], "preferences": "喜欢辣味，关注新品"},
    {"name": "李先生", "mobile": "13800000002", "tags": ["老客户", "regular"], "preferences": "午餐套餐，少辣"},
    {"name": "Ms Chen", "mobile": "13800000003", "tags": ["vip"], "preferences": "family dinners, mild dishes"},
]

MOBILE = re.compile(r"^\+?\d{6,15}$")


def _register(name: str, **kwargs: Any):
    # The registry takes a reloaded module's registration again and refuses another tool of the name.
    return python_tool(name=name, pack=PACK, **kwargs)


def _dish_text(dish: Any) -> str:
    if isinstance(dish, dict):
        return " ".join(str(value) for value in dish.values())
    return str(dish)


def _dish_name(dish: Any) -> str:
    if isinstance(dish, dict):
        return str(dish.get("name") or dish.get("dish") or dish.get("title") or _dish_text(dish))
    return str(dish).strip()


@_register(
    "filter_spicy_dishes",
    label_en="Keep the spicy dishes",
    label_zh="筛选辣味菜品",
    description_en="Keep the spicy dishes of a list of recommendations (names, or records with a name).",
    description_zh="从推荐菜品中只保留辣味菜品。",
    parameters={
        "type": "object",
        "properties": {"recommendations": {"type": ["array", "string", "object"]}},
        "required": ["recommendations"],
    },
)
def filter_spicy_dishes(recommendations: Any) -> list[str]:
    if isinstance(recommendations, dict):
        recommendations = recommendations.get("results") or recommendations.get("dishes") or []
    if isinstance(recommendations, str):
        recommendations = [part for part in re.split(r"[\n,，、;；]+", recommendations) if part.strip()]
    spicy = []
    for dish in recommendations:
        if isinstance(dish, dict) and isinstance(dish.get("spicy"), bool | int) and not isinstance(dish["spicy"], str):
            keep = bool(dish["spicy"])
        else:
            keep = any(word in _dish_text(dish).lower() for word in SPICY_WORDS)
        if keep:
            spicy.append(_dish_name(dish))
    return spicy


@_register(
    "plugin_user_info_by_tag_get",
    label_en="Customer by tag",
    label_zh="按标签查客户",
    description_en="The first customer with a tag (demo customer list), with mobile and preferences.",
    description_zh="根据用户标签获取用户详细信息（演示客户列表）。",
    parameters={"type": "object", "properties": {"tag": {"type": "string"}}, "required": ["tag"]},
)
def user_info_by_tag_get(tag: str) -> dict[str, Any]:
    wanted = tag.strip().lower()
    for customer in DEMO_CUSTOMERS:
        if wanted in (t.lower() for t in customer["tags"]):
            return dict(customer)
    return {"name": "", "mobile": "", "tags": [], "preferences": ""}


@_register(
    "plugin_marketing_article_generate",
    label_en="Marketing text",
    label_zh="生成营销短文",
    description_en="A short marketing text for a topic and an audience (a fixed template, no model call).",
    description_zh="为主题和目标用户生成营销短文（固定模板，不调用模型）。",
    parameters={
        "type": "object",
        "properties": {"topic": {"type": "string"}, "audience": {"type": "string"}},
        "required": ["topic"],
    },
)
def marketing_article_generate(topic: str, audience: str = "") -> str:
    text = f"【{topic}】"
    if audience:
        text += f" 为您精选：{audience}。"
    return text + " 欢迎到店品尝，回复TD退订。"


@_register(
    "plugin_sms_send",
    label_en="Send a text message",
    label_zh="发送短信",
    description_en="Send a text message (simulated: no SMS gateway is configured; the message is only checked).",
    description_zh="发送短信（模拟：未配置短信网关，只校验内容）。",
    parameters={
        "type": "object",
        "properties": {"mobile": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
        "required": ["mobile", "body"],
    },
)
def sms_send(mobile: str, body: str, subject: str = "", call: ToolCallContext | None = None) -> ToolResult:
    sent = bool(MOBILE.match(mobile.strip())) and bool(body.strip())
    message = {"mobile": mobile, "subject": subject, "body": body, "sent": sent, "simulated": True}
    # The outbox grows: the context's keys replace the turn's, so the tool returns the whole list.
    earlier = call.context.get("sms_outbox") if call is not None else None
    return ToolResult(content=sent, context={"sms_outbox": [*(earlier if isinstance(earlier, list) else []), message]})

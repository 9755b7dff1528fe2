"""The restaurant pack's tools: 菜单应用 `menu`, 点餐应用 `order`, 结账应用 `checkout` (seed 1)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from agents.packs.restaurant import PACK, services
from agents.tools.base import Tool, ToolCallContext, ToolError, ToolResult
from agents.tools.registry import register_tool
from core.db import database_sync_to_async
from tenants.scope import tenant_scope


def _price(value: Any) -> str:
    return f"¥{value:.2f}"


def _menu_text(call: ToolCallContext, category: str) -> str:
    with tenant_scope(call.tenant):
        items = services.menu_list(tenant=call.tenant, category=category)
    if not items:
        if category:
            return _("The menu has no dishes in the category %(category)s.") % {"category": category}
        return _("The menu is empty.")
    # A blank line after the heading, so the list renders as a list in the chat (Markdown).
    lines = [_("Menu:"), ""]
    for item in items:
        line = f"- {item.name}"
        if item.category:
            line += f" [{item.category}]"
        line += f" {_price(item.price)}"
        if item.description:
            line += f" - {item.description}"
        if item.spicy:
            line += " " + _("(spicy)")
        if item.sold_out:
            line += " " + _("(sold out)")
        lines.append(line)
    return "\n".join(lines)


@register_tool
class MenuTool(Tool):
    name = "menu"
    label_en = "Menu lookup"
    label_zh = "菜单查询"
    pack = PACK
    description_en = (
        "The restaurant's menu (菜单应用): dishes, prices, categories, which are spicy or sold out. "
        "Call it before taking an order."
    )
    description_zh = "菜单应用：餐厅的菜单（菜品、价格、分类、是否辣、是否售完）。在点餐之前调用。"
    parameters = {
        "type": "object",
        "properties": {"category": {"type": "string", "description": "Only this category / 只看这个分类"}},
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        text = await database_sync_to_async(_menu_text)(call, arguments.get("category", ""))
        return ToolResult(content=text)


def _order(call: ToolCallContext, dish: str, quantity: int, diners: int | None) -> ToolResult:
    with tenant_scope(call.tenant):
        try:
            added = services.order_add(
                tenant=call.tenant, dish=dish, quantity=quantity, diners=diners,
                conversation_id=call.conversation_id, user_id=call.user_id,
            )  # fmt: skip
        except services.OrderError as exc:
            raise ToolError(str(exc)) from None
    text = _("Ordered: %(dish)s × %(quantity)s (%(amount)s). The order now comes to %(total)s.") % {
        "dish": added.item.name,
        "quantity": added.quantity,
        "amount": _price(added.line_total),
        "total": _price(added.order.total),
    }
    return ToolResult(content=text, context={"restaurant_order_id": added.order.pk})


@register_tool
class OrderTool(Tool):
    name = "order"
    label_en = "Order"
    label_zh = "点餐"
    pack = PACK
    description_en = (
        "Order a dish (点餐应用) when the user orders. The dish and the quantity are required: if the user has "
        "not said them, ask; never guess. The number of diners is optional."
    )
    description_zh = "点餐应用：用户点餐时调用。菜名和数量必填：用户没说就先问用户，不要自己决定。用餐人数可选。"
    parameters = {
        "type": "object",
        "properties": {
            "dish": {"type": "string", "minLength": 1, "description": "The dish as on the menu / 菜名（必填）"},
            "quantity": {"type": "integer", "minimum": 1, "description": "How many / 数量（必填）"},
            "diners": {"type": "integer", "minimum": 1, "description": "Number of diners / 用餐人数"},
        },
        "required": ["dish", "quantity"],
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        return await database_sync_to_async(_order)(
            call, arguments["dish"], arguments["quantity"], arguments.get("diners")
        )


def _checkout(call: ToolCallContext) -> ToolResult:
    with tenant_scope(call.tenant):
        try:
            order = services.order_checkout(
                tenant=call.tenant, conversation_id=call.conversation_id, user_id=call.user_id
            )
        except services.OrderError as exc:
            raise ToolError(str(exc)) from None
        lines = [f"{line.name} × {line.quantity} = {_price(line.amount)}" for line in order.lines.all()]
    text = _("Paid. Total: %(total)s (%(lines)s).") % {"total": _price(order.total), "lines": "; ".join(lines)}
    return ToolResult(content=text, context={"restaurant_order_id": order.pk, "restaurant_total": str(order.total)})


@register_tool
class CheckoutTool(Tool):
    name = "checkout"
    label_en = "Checkout"
    label_zh = "结账"
    pack = PACK
    description_en = "Check out (结账应用) when the user has finished and wants to pay: totals the order and closes it."
    description_zh = "结账应用：用户用完餐要结账时调用，计算订单总额并结账。"
    parameters = {"type": "object", "properties": {}, "additionalProperties": False}

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        return await database_sync_to_async(_checkout)(call)

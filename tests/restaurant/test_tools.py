"""The restaurant pack: menu, order and checkout on the tenant's own tables; the demo data; the admin."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from agents.packs.restaurant.demo import menu_ensure
from agents.packs.restaurant.models import MenuItem, Order, OrderLine, OrderStatus
from agents.tools import ToolCallContext, ToolError, get_tool
from core.db import database_sync_to_async
from tenants.demo import run_demo_seeders
from tenants.scope import all_tenants, tenant_scope
from tests.factories import TenantFactory


@pytest.fixture
def menus(tenant, other_tenant):
    with tenant_scope(tenant):
        menu_ensure(tenant=tenant)
    with tenant_scope(other_tenant):
        MenuItem.objects.create(tenant=other_tenant, name="Pizza", category="Main", price=Decimal("9.50"))


def test_the_tools_declare_required_arguments_in_both_languages():
    order = get_tool("order")
    assert order.parameters["required"] == ["dish", "quantity"]
    assert order.validation_errors({"dish": "包子"}) == ["arguments: 'quantity' is a required property"]
    assert order.validation_errors({"dish": "包子", "quantity": 0})
    assert order.validation_errors({"dish": "包子", "quantity": 2, "diners": 3}) == []
    for name in ("menu", "order", "checkout"):
        tool = get_tool(name)
        assert tool.description("zh-hans") != tool.description("en")
    assert "点餐应用" in order.description("zh-hans")


async def _run(name, arguments, call):
    return await get_tool(name).run(arguments, call)


@pytest.mark.django_db(transaction=True)
async def test_menu_lists_the_tenants_own_items_with_an_optional_category(tenant, member, menus):
    call = ToolCallContext(tenant=tenant, user_id=member.pk)
    text = (await _run("menu", {}, call)).content
    assert text.startswith("Menu:")
    assert "包子 [小吃] ¥3.00" in text
    assert "面包" in text and "(sold out)" in text
    assert "Pizza" not in text
    drinks = (await _run("menu", {"category": "饮料"}, call)).content
    assert "可乐" in drinks and "包子" not in drinks
    assert "no dishes" in (await _run("menu", {"category": "甜品"}, call)).content


@pytest.mark.django_db(transaction=True)
async def test_order_sold_out_unknown_and_checkout(tenant, other_tenant, member, menus):
    call = ToolCallContext(tenant=tenant, user_id=member.pk)
    result = await _run("order", {"dish": "包子", "quantity": 3, "diners": 2}, call)
    assert result.content == "Ordered: 包子 × 3 (¥9.00). The order now comes to ¥9.00."
    await _run("order", {"dish": "可乐", "quantity": 2}, call)
    await _run("order", {"dish": "包子", "quantity": 1}, call)
    with pytest.raises(ToolError, match="Sorry, 面包 is sold out today"):
        await _run("order", {"dish": "面包", "quantity": 1}, call)
    with pytest.raises(ToolError, match=r"Pizza is not on the menu\. The dishes are: 包子、饺子"):
        await _run("order", {"dish": "Pizza", "quantity": 1}, call)  # another tenant's dish

    def state():
        with tenant_scope(tenant):
            order = Order.objects.get()
            return order, [(line.name, line.quantity) for line in order.lines.all()]

    order, lines = await database_sync_to_async(state)()
    assert lines == [("包子", 4), ("可乐", 2)]
    assert order.diners == 2 and order.total == Decimal("22.00") and order.status == OrderStatus.OPEN

    paid = await _run("checkout", {}, call)
    assert paid.content == "Paid. Total: ¥22.00 (包子 × 4 = ¥12.00; 可乐 × 2 = ¥10.00)."
    assert paid.context["restaurant_total"] == "22.00"
    with pytest.raises(ToolError, match="no open order"):
        await _run("checkout", {}, call)
    order, _lines = await database_sync_to_async(state)()
    assert order.status == OrderStatus.PAID and order.closed_at is not None
    # A new order after checkout starts afresh.
    await _run("order", {"dish": "饺子", "quantity": 1}, call)

    def counts():
        with all_tenants(reason="test: count both tenants' orders"):
            return Order.objects.filter(tenant=other_tenant).count(), Order.objects.filter(tenant=tenant).count()

    assert await database_sync_to_async(counts)() == (0, 2)


@pytest.mark.django_db(transaction=True)
async def test_each_conversation_has_its_own_open_order(tenant, member, menus):
    from agents.services import agent_create, conversation_start

    def start():
        with tenant_scope(tenant):
            agent = agent_create(tenant=tenant, name="Waiter")
            return conversation_start(agent=agent, user=member).pk, conversation_start(agent=agent, user=member).pk

    first, second = await database_sync_to_async(start)()
    await _run("order", {"dish": "包子", "quantity": 2}, ToolCallContext(tenant, member.pk, conversation_id=first))
    await _run("order", {"dish": "饺子", "quantity": 1}, ToolCallContext(tenant, member.pk, conversation_id=second))
    paid = await _run("checkout", {}, ToolCallContext(tenant, member.pk, conversation_id=first))
    assert "¥6.00" in paid.content and "饺子" not in paid.content

    def open_orders():
        with tenant_scope(tenant):
            return list(Order.objects.filter(status=OrderStatus.OPEN).values_list("conversation_id", flat=True))

    assert await database_sync_to_async(open_orders)() == [second]


def test_demo_seeder_is_idempotent_and_only_for_tenants_with_the_pack(db):
    from agents.models import Agent

    restaurant = TenantFactory(name="餐厅示范", slug="restaurant", packs=["restaurant"])
    energy = TenantFactory(name="能源示范", slug="energy")
    lines: list[str] = []
    run_demo_seeders([restaurant, energy], lines.append, pack="restaurant")
    with tenant_scope(restaurant):
        MenuItem.objects.filter(name="包子").update(price=Decimal("99"))
    run_demo_seeders([restaurant, energy], lines.append, pack="restaurant")
    restaurant_lines = [line for line in lines if line.startswith("Restaurant")]  # the pack's own seeder's lines
    assert len(restaurant_lines) == 2 and "menu items" in restaurant_lines[0]
    with tenant_scope(restaurant):
        assert MenuItem.objects.get(name="面包").sold_out
        assert MenuItem.objects.get(name="包子").price == Decimal("3.00")
        waiter = Agent.objects.get(name__startswith="成都小吃服务员")
        assert waiter.kind == "react"
        assert waiter.tools == ["menu", "order", "checkout"]
        assert "成都小吃" in waiter.system_prompt
        assert waiter.versions.count() == 1
        assert waiter.published_version().snapshot["tools"] == ["menu", "order", "checkout"]
    with tenant_scope(energy):
        assert not MenuItem.objects.exists()


@pytest.mark.django_db
def test_admin_shows_only_the_tenants_menu_and_orders(login, tenant_admin, tenant, other_tenant, menus):
    with tenant_scope(other_tenant):
        pizza = MenuItem.objects.get(name="Pizza")
        order = Order.objects.create(tenant=other_tenant)
        OrderLine.objects.create(tenant=other_tenant, order=order, name="Pizza", unit_price=1, quantity=1)
    with tenant_scope(tenant):
        bun = MenuItem.objects.get(name="包子")
    client = login(tenant_admin, tenant)
    page = client.get(reverse("admin:restaurant_menuitem_changelist")).content.decode()
    assert "包子" in page and "Pizza" not in page
    assert client.get(reverse("admin:restaurant_menuitem_change", args=[bun.pk])).status_code == 200
    assert client.get(reverse("admin:restaurant_menuitem_change", args=[pizza.pk])).status_code in (302, 404)
    assert client.get(reverse("admin:restaurant_order_change", args=[order.pk])).status_code in (302, 404)
    response = client.post(
        reverse("admin:restaurant_menuitem_add"),
        {"name": "豆花", "category": "小吃", "price": "4", "description": "", "position": "10"},
    )
    assert response.status_code == 302
    with tenant_scope(tenant):
        assert MenuItem.objects.get(name="豆花").tenant_id == tenant.pk

"""The demo waiter end to end: the offline demo model and the tool loop take an order on the demo menu."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents.packs.restaurant.demo import seed_restaurant_demo
from agents.packs.restaurant.models import Order, OrderStatus
from agents.services import conversation_start
from core.db import database_sync_to_async
from llm.demo import demo_engine
from llm.services import provider_ensure_demo
from tenants.scope import tenant_scope
from tests.factories import TenantFactory
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)


async def _say(tenant, conversation, text):
    _user, reply, sink = await user_turn(tenant, conversation, text)
    return reply.content, sink.tools()


@pytest.fixture
def waiter_conversation(member):
    def make():
        restaurant = TenantFactory(name="餐厅示范", slug="restaurant", packs=["restaurant"])
        provider_ensure_demo(tenant=restaurant)
        seed_restaurant_demo([restaurant], lambda line: None)
        with tenant_scope(restaurant):
            from agents.models import Agent

            waiter = Agent.objects.get(name__startswith="成都小吃服务员")
            return restaurant, conversation_start(agent=waiter, user=member)

    return database_sync_to_async(make)


@pytest.mark.parametrize(("language", "sold_out"), [("en", "面包 is sold out"), ("zh-hans", "面包今天已售罄")])
async def test_the_demo_waiter_takes_an_order_end_to_end(waiter_conversation, monkeypatch, language, sold_out):
    from django.utils import translation

    monkeypatch.setitem(demo_engine().defaults, "delay", 0)  # the demo's typing pace only slows the test down
    tenant, conversation = await waiter_conversation()
    # The tools answer in the user's language; the demo waiter relays them either way.
    with translation.override(language):
        text, tools = await _say(tenant, conversation, "你们有什么吃的？")
        assert tools == [("menu", "completed")]
        assert "包子" in text and "面包" in text

        text, tools = await _say(tenant, conversation, "我要包子")
        assert tools == []  # no quantity given: the waiter asks instead of inventing one
        assert "包子要几份" in text

        text, tools = await _say(tenant, conversation, "来3个包子")
        assert tools == [("order", "completed")]
        assert "包子 × 3" in text

        text, tools = await _say(tenant, conversation, "再来两个面包")
        assert tools == [("order", "failed")]
        assert sold_out in text and "Error" not in text

        text, tools = await _say(tenant, conversation, "结账")
        assert tools == [("checkout", "completed")]
        assert "¥9.00" in text and "谢谢光临" in text

        def order():
            with tenant_scope(tenant):
                return Order.objects.get(conversation=conversation)

        paid = await database_sync_to_async(order)()
    assert paid.status == OrderStatus.PAID and paid.total == Decimal("9.00")

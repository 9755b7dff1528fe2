"""The demo 黄焖鸡点餐大师: the offline demo model searches the menu knowledge base through the plugin and answers
with the dish it found, citing the document."""

from __future__ import annotations

import pytest

from agents.packs.restaurant.demo import seed_restaurant_demo
from agents.services import conversation_start
from core.db import database_sync_to_async
from knowledge.demo import seed_demo_knowledge
from llm.demo import demo_engine
from llm.services import provider_ensure_demo
from tenants.scope import tenant_scope
from tests.factories import TenantFactory
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def advisor_conversation(member, settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")

    def make():
        restaurant = TenantFactory(name="餐厅示范", slug="restaurant", packs=["restaurant"])
        provider_ensure_demo(tenant=restaurant)
        seed_demo_knowledge([restaurant], lambda line: None)
        seed_restaurant_demo([restaurant], lambda line: None)
        seed_restaurant_demo([restaurant], lambda line: None)  # idempotent: no second version
        with tenant_scope(restaurant):
            from agents.models import Agent

            advisor = Agent.objects.get(name__startswith="黄焖鸡点餐大师")
            assert advisor.versions.count() == 1
            assert list(advisor.knowledge_bases.values_list("name", flat=True)) == ["huangmenji_menu"]
            return restaurant, conversation_start(agent=advisor, user=member)

    return database_sync_to_async(make)


async def test_the_menu_advisor_recommends_from_the_knowledge_base_and_cites_it(advisor_conversation, monkeypatch):
    monkeypatch.setitem(demo_engine().defaults, "delay", 0)
    tenant, conversation = await advisor_conversation()

    _user, reply, sink = await user_turn(tenant, conversation, "有香菇的菜吗？")

    assert [frame["name"] for frame in sink.of("tool")] == ["plugin_ai_knowledge_base_query"] * 2
    assert "香菇黄焖鸡" in reply.content, [frame.get("result") for frame in sink.of("tool")]
    assert "[huangmenji_menu.json #" in reply.content

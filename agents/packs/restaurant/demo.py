"""Demo data of the restaurant pack: seed 1's menu (面包 sold out) and a waiter agent for the restaurant tenant."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal

from agents.packs.restaurant.models import MenuItem
from agents.services import agent_ensure
from knowledge.models import KnowledgeBase
from tenants.models import Tenant
from tenants.scope import tenant_scope

# (name, category, price, description, spicy, sold_out)
DEMO_MENU = [
    ("包子", "小吃", "3.00", "鲜肉大包，一个", False, False),
    ("饺子", "小吃", "15.00", "猪肉白菜水饺，一份十二个", False, False),
    ("红油抄手", "小吃", "16.00", "成都红油抄手，一碗", True, False),
    ("担担面", "面食", "14.00", "芽菜肉末担担面，一碗", True, False),
    ("面包", "小吃", "6.00", "现烤面包，一个", False, True),
    ("经典黄焖鸡", "主菜", "12.00", "鸡肉鲜嫩，配以浓郁酱汁和土豆", False, False),
    ("辣味黄焖鸡", "主菜", "13.00", "经典黄焖鸡基础上加入辣椒调味", True, False),
    ("可乐", "饮料", "5.00", "一瓶", False, False),
    ("雪碧", "饮料", "5.00", "一瓶", False, False),
]

# Seed 1's 成都小吃 prompt, for function calling: the tools replace its to_sys JSON (the runtime adds the
# to_sys/to_user protocol itself for models without function calling).
WAITER_PROMPT = """现在有3个角色，sys 代表应用程序系统，user 代表用户，
你的角色是一名餐厅服务员，你的目的是服务用户，请你根据上下文决定是否调用 sys 应用程序系统
（菜单应用 menu、点餐应用 order、结账应用 checkout）。

规则：
1，要一句一句的和用户沟通。
2，调用程序的具体参数要在上下文中确定，比如点餐应用的菜名和数量，上下文里用户没有提供，你就不能擅自决定具体数值，要先问用户。
3，应用程序返回后，你要结合返回信息继续和用户沟通，要注意隐藏程序系统这个信息，让用户感知不到。

应用程序：
1，点餐应用 order：当用户点餐时调用；和用户沟通确定：用户人数，菜名（必填），数量（必填）。
2，菜单应用 menu：在点餐之前调用。
3，结账应用 checkout：当用户用完餐需要结账时调用。

你的餐厅名字是: 成都小吃
You are the waiter of the restaurant 成都小吃 (Chengdu Snacks); answer in the user's language."""

WAITER = {
    "name": "成都小吃服务员 / Chengdu Snacks waiter",
    "description": "成都小吃的点餐服务员：看菜单、点餐、结账。Takes orders at Chengdu Snacks: menu, orders, checkout.",
    "system_prompt": WAITER_PROMPT,
    "kind": "react",
    "tools": ["menu", "order", "checkout"],
    "token_overflow_config": {"strategy": "sliding_window", "max_tokens": 8192},
}


# Seed 1's 黄焖鸡点餐大师: answers from the menu knowledge base (knowledge/demo.py seeds `huangmenji_menu` first).
MENU_ADVISOR = {
    "name": "黄焖鸡点餐大师 / Menu advisor",
    "description": "根据菜单知识库推荐菜品并注明出处。Recommends dishes from the menu knowledge base, citing it.",
    "system_prompt": "你是黄焖鸡点餐大师。用知识库工具查菜单，只根据查到的菜品推荐，"
    "并标注来源，例如 [huangmenji_menu.json #2]。"
    "You recommend dishes from the menu knowledge base only, citing the source; answer in the user's language.",
    "kind": "react",
    "tools": [],
    "token_overflow_config": {"strategy": "sliding_window", "max_tokens": 8192},
}
MENU_KNOWLEDGE_BASE = "huangmenji_menu"


def menu_ensure(*, tenant: Tenant) -> int:
    """The demo menu in `tenant`'s table (created or brought back to the demo values); returns the number changed."""
    changed = 0
    for position, (name, category, price, description, spicy, sold_out) in enumerate(DEMO_MENU, start=1):
        values = {
            "category": category,
            "price": Decimal(price),
            "description": description,
            "spicy": spicy,
            "sold_out": sold_out,
            "position": position,
        }
        item = MenuItem.objects.filter(tenant=tenant, name=name).first()
        if item is None:
            MenuItem.objects.create(tenant=tenant, name=name, **values)
            changed += 1
        elif any(getattr(item, key) != value for key, value in values.items()):
            for key, value in values.items():
                setattr(item, key, value)
            item.save()
            changed += 1
    return changed


def seed_restaurant_demo(tenants: Sequence[Tenant], write: Callable[[str], None]) -> None:
    """Each tenant gets the menu and the waiter agent, published (idempotent). `seed_demo` gives it the demo
    tenants that have the restaurant pack (tenants.demo)."""
    for tenant in tenants:
        with tenant_scope(tenant):
            menu_ensure(tenant=tenant)
            agent, _published = agent_ensure(tenant=tenant, spec=WAITER)
            count = MenuItem.objects.filter(tenant=tenant).count()
            version = agent.published_version().number
            menu_base = KnowledgeBase.objects.filter(name=MENU_KNOWLEDGE_BASE).first()
            advisor = None
            if menu_base is not None:
                advisor, _published = agent_ensure(tenant=tenant, spec={**MENU_ADVISOR, "knowledge_bases": [menu_base]})
        write(f"Restaurant / 餐厅 @ {tenant.name}: {count} menu items, {agent.name} (v{version})")
        if advisor is not None:
            write(f"Restaurant / 餐厅 @ {tenant.name}: {advisor.name} answers from {MENU_KNOWLEDGE_BASE}")

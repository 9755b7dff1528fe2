"""Demo knowledge bases: seed 1's 黄焖鸡 menu for the restaurant tenant (`huangmenji_menu`, the name its workflow
queries) and a short bilingual note on PV basics for the energy tenant. Ingested synchronously with the local
embedder (a few chunks, about a second), so the demo works before any worker runs; idempotent."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from knowledge.ingest import document_ingest
from knowledge.models import DocumentStatus, KnowledgeBase
from knowledge.selectors import outdated_documents
from knowledge.services import document_add, knowledge_base_create
from tenants.models import Tenant
from tenants.scope import tenant_scope

RESTAURANT_SLUG = "restaurant"
ENERGY_SLUG = "energy"

# Seed 1's menu (the first three dishes) in its format, and a few more in the same format.
HUANGMENJI_MENU = {
    "1": {"name": "经典黄焖鸡", "description": "鸡肉鲜嫩，配以浓郁酱汁和土豆", "price": "12元", "category": "主菜"},
    "2": {"name": "辣味黄焖鸡", "description": "经典黄焖鸡基础上加入辣椒调味", "price": "13元", "category": "主菜"},
    "3": {"name": "香菇黄焖鸡", "description": "黄焖鸡加入香菇，风味独特", "price": "14元", "category": "主菜"},
    "4": {"name": "黄焖排骨", "description": "猪排骨慢火焖煮，酱香浓郁，配青椒", "price": "18元", "category": "主菜"},
    "5": {"name": "番茄黄焖鸡", "description": "加入番茄同焖，酸甜开胃，不辣", "price": "14元", "category": "主菜"},
    "6": {"name": "米饭", "description": "东北大米，一碗，可免费续一次", "price": "2元", "category": "主食"},
    "7": {"name": "酸梅汤", "description": "自制冰镇酸梅汤，解辣", "price": "5元", "category": "饮料"},
}

PV_BASICS_MD = """# 光伏发电基础 / PV basics

## 原理 / How it works
光伏组件利用半导体的光生伏特效应，把太阳光直接转换成直流电。逆变器再把直流电变成交流电，供家庭使用或并入电网。
A photovoltaic (PV) module turns sunlight straight into direct current through the photovoltaic effect of its
semiconductor cells. An inverter converts the direct current to alternating current for the home or the grid.

## 发电量 / Yield
年发电量约等于装机容量乘以当地年等效利用小时数，再乘以系统效率（通常为 0.8 左右）。
例如 10 kW 系统、1200 小时、效率 0.8，每年约发电 9600 kWh。
Annual yield is roughly the installed capacity times the local full-load hours times the performance ratio
(about 0.8). A 10 kW system with 1,200 hours and a ratio of 0.8 makes about 9,600 kWh a year.

## 影响因素 / What affects it
朝向与倾角、遮挡、温度和灰尘都会影响发电量。组件温度越高，效率越低；定期清洗可以减少灰尘损失。
Orientation and tilt, shading, temperature and dust all change the yield. Hot modules are less efficient, and
regular cleaning reduces soiling losses.

## 寿命与衰减 / Lifetime and degradation
晶硅组件的寿命一般为 25 年以上，首年衰减约 2%，之后每年约 0.5%。逆变器通常 10 到 15 年需要更换。
Crystalline silicon modules last 25 years or more; they lose about 2% in the first year and about 0.5% a year
after that. Inverters are usually replaced after 10 to 15 years.
"""

DEMO_KNOWLEDGE = {
    RESTAURANT_SLUG: {
        "name": "huangmenji_menu",
        "description": "黄焖鸡餐馆菜单，每道菜一条记录。The 黄焖鸡 menu, a record per dish.",
        "documents": [("huangmenji_menu.json", json.dumps(HUANGMENJI_MENU, ensure_ascii=False, indent=2).encode())],
    },
    ENERGY_SLUG: {
        "name": "pv_basics",
        "description": "光伏发电基础知识（中英文）。PV basics in Chinese and English.",
        "documents": [("pv-basics.md", PV_BASICS_MD.encode())],
    },
}


def knowledge_demo_ensure(*, tenant: Tenant, spec: dict) -> tuple[KnowledgeBase, int]:
    """The knowledge base of `spec` with its documents ingested (created, or brought back to the demo content).
    Returns it and its number of ready documents. Call inside the tenant's scope."""
    knowledge_base = KnowledgeBase.objects.filter(name=spec["name"]).first()
    if knowledge_base is None:
        knowledge_base = knowledge_base_create(tenant=tenant, name=spec["name"], description=spec["description"])
    ready = 0
    for name, content in spec["documents"]:
        document = document_add(knowledge_base=knowledge_base, name=name, content=content, queue=False)
        outdated = outdated_documents(knowledge_base=knowledge_base).filter(pk=document.pk).exists()
        if document.status != DocumentStatus.READY or outdated:  # new, failed, or from an older local model
            document_ingest(document_id=document.pk)
            document.refresh_from_db()
        ready += document.status == DocumentStatus.READY
    return knowledge_base, ready


def seed_demo_knowledge(tenants: Sequence[Tenant], write: Callable[[str], None]) -> None:
    """The demo tenants' knowledge bases (idempotent)."""
    for tenant in tenants:
        spec = DEMO_KNOWLEDGE.get(tenant.slug)
        if spec is None:
            continue
        with tenant_scope(tenant):
            knowledge_base, ready = knowledge_demo_ensure(tenant=tenant, spec=spec)
            chunks = knowledge_base.chunks.count()
        write(f"Knowledge / 知识库 @ {tenant.name}: {knowledge_base.name} ({ready} documents ready, {chunks} chunks)")

"""Demo agents for `seed_demo`: one per token-overflow strategy in each demo tenant, published (idempotent)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agents.services import agent_ensure
from memory.overflow import STRATEGY_NONE, STRATEGY_SLIDING_WINDOW, STRATEGY_SUMMARIZE
from tenants.models import Tenant
from tenants.scope import tenant_scope

# System prompts avoid the words the offline demo model's script reacts to ("summar", "planner"...), so the
# demo agents get its ordinary answers.
GENERAL = {
    "name": "通用助手 / General assistant",
    "description": "回答一般问题。Answers general questions.",
    "system_prompt": "你是一个乐于助人的助手。You are a helpful assistant; answer in the user's language.",
    "token_overflow_config": {"strategy": STRATEGY_NONE},
}
LONG_CONVERSATION = {
    "name": "长对话助手 / Long-conversation assistant",
    "description": "适合很长的对话：较早的消息会被压缩。For very long conversations: older messages are condensed.",
    "system_prompt": "你是一个耐心的助手，陪用户进行很长的对话。You are a patient assistant for long conversations.",
    "token_overflow_config": {"strategy": STRATEGY_SUMMARIZE, "max_tokens": 8192, "summary_threshold": 20},
    # Remembers each user across conversations; extraction by rules, which the offline demo model needs (it cannot
    # write the extraction JSON).
    "long_term_memory": True,
    "memory_extraction": "rules",
}
DEMO_AGENTS: dict[str, list[dict[str, Any]]] = {
    "energy": [
        {
            "name": "能源顾问 / Energy advisor",
            "description": "光伏、储能和用电方面的建议。Advice on solar power, storage and electricity use.",
            "system_prompt": "你是能源顾问，解答光伏和储能问题。You are an energy advisor for solar power and storage.",
            "token_overflow_config": {"strategy": STRATEGY_SLIDING_WINDOW, "max_tokens": 8192},
        },
        LONG_CONVERSATION,
        GENERAL,
    ],
    "restaurant": [
        {
            "name": "餐厅助手 / Restaurant assistant",
            "description": "菜单、订座和营业时间。Menus, reservations and opening hours.",
            "system_prompt": "你是餐厅助手，介绍菜品并帮助订座。You are a restaurant assistant: dishes and bookings.",
            "token_overflow_config": {"strategy": STRATEGY_SLIDING_WINDOW, "max_tokens": 8192},
        },
        LONG_CONVERSATION,
        GENERAL,
    ],
}


def seed_demo_agents(tenants: Sequence[Tenant], write: Callable[[str], None]) -> None:
    """Each demo tenant gets its agents (none, sliding window, summarize), published, using the default provider."""
    for tenant in tenants:
        specs = DEMO_AGENTS.get(tenant.slug)
        if not specs:
            continue
        names = []
        with tenant_scope(tenant):
            for spec in specs:
                agent, _published = agent_ensure(tenant=tenant, spec=spec)
                names.append(f"{agent.name} (v{agent.published_version().number})")
        write(f"Agents / 智能体 @ {tenant.name}: " + ", ".join(names))

"""The recall budget is a share of the agent's model window (issue 38, point 1): MEMORY_RECALL_SHARE of the window
its provider lists (or the overflow's cap), between MEMORY_RECALL_TOKENS and MEMORY_RECALL_MAX_TOKENS; a turn on a
large-window model is given more of the user's long history than one on a small window."""

import asyncio
import datetime as dt

import pytest

from agents.services import agent_create, conversation_start
from core.db import database_sync_to_async
from memory.longterm.events import events_store, rule_event
from memory.longterm.recall import owner_of, recall_budget
from memory.overflow import RECALLED_HEADING
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

T0 = dt.datetime(2024, 3, 1, 9, 0, tzinfo=dt.UTC)
FILLER = " We also talked for a long while about the weather, the traffic and what was on television that week."


def test_the_budget_is_a_share_of_the_window_between_the_floor_and_the_cap(settings):
    settings.MEMORY_RECALL_TOKENS, settings.MEMORY_RECALL_MAX_TOKENS = 800, 4000
    settings.MEMORY_RECALL_SHARE = 0.02
    assert recall_budget(128_000) == 2560
    assert recall_budget(8192) == 800  # 2 % of a small window is below the floor
    assert recall_budget(1_000_000) == 4000  # a huge window is capped
    assert recall_budget(None) == 800  # the provider does not say: the floor
    settings.MEMORY_RECALL_SHARE = 0.0
    assert recall_budget(128_000) == 800  # the share off: the fixed setting alone


def _setup(tenant, member, base_url: str, window: int):
    """An agent on a model of `window` tokens, and 24 long events of the user that all match the question."""
    with tenant_scope(tenant):
        ModelProviderFactory(
            tenant=tenant, name="scripted", base_url=base_url, is_default=True, max_retries=0,
            chat_models=[{"name": "gpt-4", "context_window": window, "function_calling": True}],
        )  # fmt: skip
        agent = agent_create(
            tenant=tenant, name="Companion", system_prompt="You are a companion.", model="gpt-4",
            token_overflow_config={"strategy": "none"}, long_term_memory=True, memory_extraction="rules",
        )  # fmt: skip
        owner = None
        for day in range(24):
            conversation = conversation_start(agent=agent, user=member)
            owner = owner_of(conversation)
            text = f"On my trip number {day} I hiked up mountain peak {day} with my brother Tom." + FILLER
            events_store(
                owner, {"new_events": [rule_event(actor="user", text=text)]}, conversation_id=conversation.pk,
                now=T0 + dt.timedelta(days=day),
            )  # fmt: skip
        return conversation_start(agent=agent, user=member)


def _recalled_events(scripted_llm) -> int:
    system = scripted_llm.requests()[-1]["body"]["messages"][0]["content"]
    assert RECALLED_HEADING in system
    return system.count("[evt_")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("window", [8192, 200_000])
async def test_a_turn_on_a_larger_window_is_given_more_of_the_history(window, tenant, member, scripted_llm, settings):
    settings.MEMORY_EXTRACT_IN_THREAD = False
    settings.MEMORY_RECALL_TOKENS, settings.MEMORY_RECALL_MAX_TOKENS = 400, 4000
    settings.MEMORY_RECALL_SHARE = 0.02  # 8192 -> 163 (the floor, 400); 200,000 -> 4,000 (the cap)
    conversation = await database_sync_to_async(_setup)(tenant, member, scripted_llm.base_url, window)
    _user, reply, _sink = await user_turn(tenant, conversation, "Which mountain peaks did I hike with my brother Tom?")
    shown = await asyncio.to_thread(_recalled_events, scripted_llm)
    events = [item for item in reply.usage["memories"] if item["kind"] == "event"]
    assert len(events) == shown
    if window == 8192:
        assert 1 <= shown <= 6  # 200 tokens of events (half the floor)
    else:
        assert shown >= 12  # the walk's 14 events, as far as 2,000 tokens hold them

"""An agent's message limit (agents.limits): the platform's 20,000 characters, or what fits the model's window after
the system prompt and the reply's reserve; the agent pages state it."""

import math

import pytest
from django.urls import reverse

from agents.config import agent_config
from agents.limits import MAX_MESSAGE_CHARS, TOKENS_PER_CHARACTER, message_limit
from agents.services import agent_create
from llm.tokens import TOKENS_PER_MESSAGE, count_text
from memory.overflow import fixed_tokens
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory

pytestmark = pytest.mark.django_db

PROMPT = "You explain solar panels in plain words."


@pytest.fixture
def provider(tenant):
    with tenant_scope(tenant):
        return ModelProviderFactory(
            tenant=tenant,
            name="Small and large",
            is_default=True,
            chat_models=[
                {"name": "small-model", "context_window": 600, "function_calling": True},
                {"name": "gpt-4o", "context_window": 128000, "function_calling": True},
                {"name": "unsized-model"},
            ],
            default_chat_model="gpt-4o",
        )


def _limit(tenant, **fields):
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name=fields.pop("name", "Panel helper"), system_prompt=PROMPT, **fields)
        return agent, message_limit(agent_config(agent=agent))


def test_a_small_window_sets_the_limit_after_the_prompt_and_the_reserve(tenant, provider):
    _agent, limit = _limit(tenant, model="small-model")
    room = math.floor(600 * 0.9) - fixed_tokens(system_prompt=PROMPT, summary=None, model="small-model")
    room -= TOKENS_PER_MESSAGE
    assert limit.tokens == room and limit.chars == room // TOKENS_PER_CHARACTER and limit.window == 600
    assert limit.by_model and limit.refusal("x" * limit.chars) is None
    assert f"longer than {limit.chars} characters" in limit.refusal("x" * (limit.chars + 1))


def test_a_large_or_unknown_window_leaves_the_platform_limit(tenant, provider):
    _agent, large = _limit(tenant, model="gpt-4o")
    _agent, unsized = _limit(tenant, name="Unsized", model="unsized-model")
    assert large.chars == unsized.chars == MAX_MESSAGE_CHARS and not large.by_model
    assert unsized.tokens is None
    assert large.refusal("字" * MAX_MESSAGE_CHARS) is None


def test_the_overflow_maximum_and_reserve_count_when_smaller_than_the_window(tenant, provider):
    config = {"strategy": "sliding_window", "max_tokens": 1000, "reserve_ratio": 0.5}
    _agent, limit = _limit(tenant, model="gpt-4o", token_overflow_config=config)
    system = fixed_tokens(system_prompt=PROMPT, summary=None, model="gpt-4o")
    assert limit.window == 1000 and limit.tokens == 500 - system - TOKENS_PER_MESSAGE


def test_text_dearer_than_the_character_bound_is_counted_in_tokens(tenant, provider):
    _agent, limit = _limit(tenant, model="small-model")
    parrots = "🦜" * limit.chars  # within the characters, 3 tokens each
    tokens = count_text(parrots, "small-model")
    assert tokens > limit.tokens
    assert limit.refusal(parrots) == (
        f"The message is {tokens} tokens, more than the {limit.tokens} that small-model has room for after the "
        "agent's instructions and the reply's reserve. Shorten it, or put long text in a knowledge base."
    )


def test_the_agent_pages_state_the_limit(login, tenant_admin, tenant, provider):
    agent, limit = _limit(tenant, model="small-model")
    client = login(tenant_admin, tenant)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    stated = f"A message to this agent may be at most {limit.chars} characters: what small-model (a window of 600"
    for url in (reverse("agents:edit", args=[agent.pk]), reverse("agents:detail", args=[agent.pk])):
        page = client.get(url).content.decode()
        assert 'id="message-limit"' in page and stated in page, url
    new = client.get(reverse("agents:create")).content.decode()
    assert f"may be at most {MAX_MESSAGE_CHARS} characters, and less when its model" in new

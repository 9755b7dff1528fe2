"""Factories for agents (create them inside the agent's tenant scope)."""

import factory

from agents.models import Agent, AgentKind


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent

    name = factory.Sequence(lambda n: f"agent {n}")
    description = "Answers questions about solar power."
    system_prompt = "You are a helpful assistant."
    model = "gpt-4"
    kind = AgentKind.CHAT
    token_overflow_config = factory.LazyFunction(lambda: {"strategy": "none"})

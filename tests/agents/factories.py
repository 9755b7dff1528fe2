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


# A workflow with one llm step (its prompt names the input x): a workflow agent's model call.
THINKER_WORKFLOW = """version: '1.0'
name: Thinker
steps:
  - id: ask
    type: input
    output:
      name: x
  - id: think
    type: llm
    prompt: 'Think about {x}.'
    outputs:
      name: answer
  - id: out
    type: output
    inputs:
      reply: '{answer}'
"""


def echo_workflow_yaml(name: str, description: str = "") -> str:
    """The smallest valid workflow document: an input step and an output step that gives the input back."""
    return f"""version: '1.0'
name: '{name}'
description: '{description}'
steps:
  - id: 'start'
    type: 'input'
    output:
      name: 'question'
      type: 'str'
  - id: 'answer'
    type: 'output'
    inputs:
      question: '{{question}}'
"""

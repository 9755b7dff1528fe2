"""Sections that apps above add to the agent page (templates/agents/detail.html), as the chat app adds its
conversation page in memory.links: the evaluation pages (evals/) show the latest run per version there, and the agent
pages never import them. A section is a template and the context it is rendered with; it may decline (None) for an
agent or a viewer it has nothing to show to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest

from agents.models import Agent
from core.registry import Registry


@dataclass(frozen=True)
class AgentSection:
    """A part of the agent page: `template` rendered with `context(agent=..., request=...)` as `section`; `order`
    places it among the others (smaller first)."""

    template: str
    context: Callable[..., dict[str, Any] | None]
    order: int = 100


@dataclass(frozen=True)
class RenderedSection:
    template: str
    context: dict[str, Any]


_sections: Registry[AgentSection] = Registry("the agent page's sections (agents.sections)", order=lambda s: s.order)


def register_agent_section(key: str, section: AgentSection) -> AgentSection:
    """Add `section` to every agent's page; called by the app that shows it, at import or from its ready()."""
    return _sections.register(key, section)


def agent_sections(*, agent: Agent, request: HttpRequest) -> list[RenderedSection]:
    """The registered sections that have something to show for `agent` to this viewer, in their order."""
    shown = []
    for section in _sections:
        context = section.context(agent=agent, request=request)
        if context is not None:
            shown.append(RenderedSection(template=section.template, context=context))
    return shown

"""Registries declared the way an app declares one, in its own module: what registers into them from
tests/core/test_registry.py is then a registrant of its own (as chat is for memory.links)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.registry import Registry, Slot


def things(order: Callable[[Any], Any] | None = None) -> Registry[Any]:
    return Registry("the test things (tests.core.declared)", order=order)


def slot() -> Slot[Any]:
    # Not required: a throwaway slot must not make the platform's own system check fail.
    return Slot("the test slot (tests.core.declared)", filled_by="the test app (tests.core)", required=False)


def register_through_a_wrapper(registry: Registry[Any], key: str, item: Any) -> Any:
    """A module's public register function, as register_tool is."""
    return registry.register(key, item)

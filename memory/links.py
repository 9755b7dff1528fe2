"""Where a conversation is read: the surface that shows conversations (chat/) registers its page here, so lower
floors (the agent pages) link to a conversation without naming a route of a floor above them."""

from __future__ import annotations

from collections.abc import Callable

from core.registry import Slot
from memory.models import Conversation

_page: Slot[Callable[[Conversation], str]] = Slot(
    "the conversation page (memory.links)", filled_by="the chat app (chat.apps.ChatConfig)"
)


def register_conversation_page(url_of: Callable[[Conversation], str]) -> None:
    """`url_of(conversation)` is the page of a conversation; called from the surface's AppConfig.ready()."""
    _page.register(url_of)


def conversation_page(conversation: Conversation) -> str:
    """The page of `conversation` (core.registry.NotRegistered when no surface registered one)."""
    return _page.get()(conversation)


def conversation_page_registered() -> bool:
    return _page.filled

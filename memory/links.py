"""Where a conversation is read: the surface that shows conversations (chat/) registers its page here, so lower
floors (the agent pages) link to a conversation without naming a route of a floor above them."""

from __future__ import annotations

from collections.abc import Callable

from memory.models import Conversation

_page: Callable[[Conversation], str] | None = None


def register_conversation_page(url_of: Callable[[Conversation], str]) -> None:
    """`url_of(conversation)` is the page of a conversation; called from the surface's AppConfig.ready()."""
    global _page
    _page = url_of


def conversation_page(conversation: Conversation) -> str | None:
    """The page of `conversation`, or None when no surface shows conversations."""
    return _page(conversation) if _page is not None else None


def conversation_page_registered() -> bool:
    return _page is not None

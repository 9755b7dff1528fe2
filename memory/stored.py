"""A conversation's active messages as the overflow strategies see them (overflow.StoredMessage), loaded only as
far as the strategy can keep them."""

from __future__ import annotations

from collections.abc import Sequence

from memory import overflow
from memory.models import Conversation, Message

# Below this many active messages one query loads them all; above it, a first query of (role, tokens) lets the
# strategy say which newest messages it can keep, and only those are loaded with their content.
SMALL_CONTEXT = 400
_STORED_FIELDS = ("pk", "role", "content", "tool_calls", "tool_call_id", "token_count")


def stored_from(conversation: Conversation, first_id: int, active: set[int]) -> list[overflow.StoredMessage]:
    # A range on the primary key, not a huge IN list: active messages are (nearly) a suffix of the conversation.
    rows = (
        Message.objects.filter(conversation=conversation, pk__gte=first_id).order_by("pk").values_list(*_STORED_FIELDS)
    )
    return [
        overflow.StoredMessage(
            id=pk,
            role=role,
            content=content,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id or None,
            token_count=tokens,
        )
        for pk, role, content, tool_calls, tool_call_id, tokens in rows
        if pk in active
    ]


def active_stored(
    ids: Sequence[int],
    conversation: Conversation,
    *,
    strategy: overflow.OverflowStrategy | None = None,
    config: overflow.OverflowConfig | None = None,
    fixed_tokens: int = 0,
) -> tuple[list[overflow.StoredMessage], int]:
    """The active messages the strategy may keep, oldest first, and the tokens of those it cannot (not loaded)."""
    if not ids:
        return [], 0
    active = set(ids)
    if strategy is None or len(ids) <= SMALL_CONTEXT:
        return stored_from(conversation, min(ids), active), 0
    # Sorted here rather than by the database: over most of a conversation PostgreSQL scans and sorts, slower.
    meta = sorted(
        row
        for row in Message.objects.filter(conversation=conversation, pk__gte=min(ids))
        .order_by()
        .values_list("pk", "role", "token_count")
        if row[0] in active
    )
    start = strategy.first_needed([(role, tokens) for _, role, tokens in meta], config, fixed_tokens=fixed_tokens)
    if start >= len(meta):
        return [], sum(tokens for _, _, tokens in meta)
    return stored_from(conversation, meta[start][0], active), sum(tokens for _, _, tokens in meta[:start])

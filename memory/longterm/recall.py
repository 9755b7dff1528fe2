"""Long-term memory around a turn: what a turn recalls before it runs, and what is kept after it.

Before: `recall_for_turn` gives the turn the events of the user's graph that match the message (followed along
relations, as a timeline), the vector memories seed 3's recall returns (with its level changes), and the
conversation's own older turns that the window dropped or the summary absorbed (M7); all within the recall
budget (`recall_budget`: a share of the model's window), as lines of the one system message's "recalled" part.
After: `turn_index` keeps the exchange for M7 (memory.longterm.extraction runs it; memory.services.after_turn
queues that work once the reply is stored, and the reply never waits for it).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core import tracing
from core.conf import setting
from llm.tokens import count_text
from memory import traces
from memory.longterm import events as event_graph
from memory.longterm import store, strength
from memory.longterm.events import excerpts
from memory.longterm.strength import Owner
from memory.models import Conversation, ConversationContext, Message, Role, TurnMemory

TURN_TEXT_CHARS = 1500
# A short message that points back ("what was her job again?", "and that one?", 她呢？, 那个呢？: at most RECENT_WIDTH
# wide, with a third-person pronoun or a demonstrative) does not name what it is about: it is searched for with the
# user's message before it in the conversation. A short message that names its subject ("Which locker code did I
# give you?") is searched alone, as are longer ones. Not tuned: the benches' questions each open a conversation of
# their own, so none of them has a turn before (tests/memory/test_recall_query.py shows both ways).
RECENT_WIDTH = 80
_POINTS_BACK = re.compile(
    r"\b(?:he|him|his|she|her|hers|it|its|they|them|their|that|this|those|these|there)\b|[他她它那这]", re.IGNORECASE
)
EVENTS_SHARE = 0.5  # of the recall budget, the part the events' timeline may take (what it leaves goes to the rest)


def owner_of(conversation: Conversation) -> Owner:
    """Whose memory a conversation reads and writes: the agent's memory of the user ("{agent}_{user}"), or for a
    plan step's conversation seed 0's "{agent}_{user}_{conversation}" (P7: agents never read each other's)."""
    key = conversation.memory_key if conversation.parent_id else f"{conversation.agent_id}_{conversation.user_id}"
    return Owner(user_id=conversation.user_id, key=key, agent_id=conversation.agent_id)


@dataclass(frozen=True)
class Recalled:
    """What a turn recalled: the lines for the system message and, per line, what it came from."""

    lines: list[str] = field(default_factory=list)
    used: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.lines)


def recall_budget(window: int | None) -> int:
    """Tokens all of a turn's recalled lines may take (counted with the model's tokenizer): MEMORY_RECALL_SHARE of
    the model's context `window`, at least MEMORY_RECALL_TOKENS and at most MEMORY_RECALL_MAX_TOKENS;
    MEMORY_RECALL_TOKENS when the window is unknown or the share is 0. A long user–assistant history needs more
    room than a fixed few hundred tokens on a large model, and a small window must not lose its prompt to memory
    (the floor is what the platform gave before the share existed)."""
    floor = int(setting("MEMORY_RECALL_TOKENS"))
    share = float(setting("MEMORY_RECALL_SHARE"))
    if not window or share <= 0:
        return floor
    return max(floor, min(int(window * share), int(setting("MEMORY_RECALL_MAX_TOKENS"))))


def _fits(line: str, used: int, budget: int, model: str) -> int | None:
    cost = count_text(line, model) + 2
    return cost if used + cost <= budget else None


@tracing.traced("memory_recall", before=traces.recall_attributes, after=traces.recall_result)
def recall_for_turn(
    conversation: Conversation,
    query: str,
    *,
    model: str = "gpt-4",
    window: int | None = None,
    now: dt.datetime | None = None,
    context: ConversationContext | None = None,
) -> Recalled:
    """The memories of the next turn for `query` (call inside the tenant scope), within `recall_budget(window)`
    tokens of `model` (`window`: the model's context window, None when the provider does not say). `context`: the
    conversation's context row when the caller has read it this turn (read here otherwise)."""
    query = (query or "").strip()
    if not query:
        return Recalled()
    query = recall_query(conversation, query, context)
    owner = owner_of(conversation)
    budget = recall_budget(window)
    lines: list[str] = []
    used_items: list[dict[str, Any]] = []
    # Events: EVENTS_SHARE of the budget (what they leave goes to the rest).
    walked = event_graph.events_walk(
        owner, query, top_k=int(setting("MEMORY_EVENTS_TOP_K")), depth=int(setting("MEMORY_EXPAND_DEPTH")), now=now
    )
    event_lines, shown = event_graph.timeline(walked, budget_tokens=int(budget * EVENTS_SHARE), model=model)
    spent = sum(count_text(line, model) + 2 for line in event_lines)
    lines += event_lines
    used_items += [
        {"kind": "event", "id": event.pk, "event_id": event.event_id, "text": event.content_summary} for event in shown
    ]
    # Vector memories (seed 3's recall, with its level changes).
    for item in strength.recall(owner, query, now=now).returned:
        line = f"(memory) {item.text}"
        cost = _fits(line, spent, budget, model)
        if cost is not None:
            lines.append(line)
            used_items.append({"kind": "memory", "id": item.pk, "text": item.text, "level": item.level})
            spent += cost
    # Older turns of this conversation that are no longer in the context.
    for turn in _old_turns(conversation, query, context):
        line = f"(earlier in this conversation) {turn.text}"
        cost = _fits(line, spent, budget, model)
        if cost is not None:
            lines.append(line)
            used_items.append({"kind": "turn", "id": turn.pk, "text": turn.text[:200]})
            spent += cost
    return Recalled(lines=lines, used=used_items)


def _active_ids(conversation: Conversation, context: ConversationContext | None) -> list[int]:
    """The ids of the messages in the conversation's context (from `context` when the caller read it)."""
    if context is not None and context.conversation_id == conversation.pk:
        return context.active_messages or []
    active = ConversationContext.objects.filter(conversation=conversation).values_list("active_messages", flat=True)
    return active.first() or []


def recall_query(conversation: Conversation, message: str, context: ConversationContext | None = None) -> str:
    """What recall searches for on `message`, the user's newest message: the message itself, or when it is short and
    points back (RECENT_WIDTH, above) the user's message before it in the conversation's context and then the
    message (one query, only then)."""
    if excerpts.width(message) > RECENT_WIDTH or not _POINTS_BACK.search(message):
        return message
    active_ids = _active_ids(conversation, context)
    earlier = (
        Message.objects.filter(pk__in=active_ids[-8:], role=Role.USER)
        .order_by("-pk")
        .values_list("content", flat=True)[:2]
    )
    before = [text.strip() for text in earlier if text.strip() and text.strip() != message]
    return f"{before[0]}\n{message}" if before else message


def _old_turns(conversation: Conversation, query: str, context: ConversationContext | None) -> list[TurnMemory]:
    active_ids = _active_ids(conversation, context)
    if not active_ids:
        return []
    first_active = min(active_ids)
    gone = np.fromiter(
        TurnMemory.objects.filter(conversation=conversation, user_message_id__lt=first_active).values_list(
            "id", flat=True
        ),
        dtype=np.int64,
    )
    if not len(gone):
        return []
    ranked = store.rank(
        TurnMemory,
        query,
        top_k=int(setting("MEMORY_TURNS_TOP_K")),
        allowed=lambda ids: np.isin(ids, gone),
        conversation_id=conversation.pk,
    )
    rows = TurnMemory.objects.in_bulk([pk for pk, _ in ranked])
    return [rows[pk] for pk, _ in ranked if pk in rows]


def turn_index(conversation: Conversation, *, user_message: Any, reply: Any | None) -> TurnMemory | None:
    """Index one exchange for M7 (idempotent per user message)."""
    parts = [f"User: {user_message.content.strip()}"]
    if reply is not None and reply.content.strip():
        parts.append(f"Assistant: {reply.content.strip()}")
    text = "\n".join(parts)
    if len(text) > TURN_TEXT_CHARS:
        text = text[: TURN_TEXT_CHARS - 1] + "…"
    owner = owner_of(conversation)
    existing = TurnMemory.objects.filter(conversation=conversation, user_message_id=user_message.pk).first()
    if existing is not None:
        return existing
    return TurnMemory.objects.create(
        user_id=owner.user_id,
        key=owner.key,
        conversation=conversation,
        user_message_id=user_message.pk,
        reply_message_id=reply.pk if reply is not None else None,
        text=text,
        **store.search_fields(text),
    )

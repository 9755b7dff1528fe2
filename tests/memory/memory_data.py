"""A user's long-term memory written through the real services (events_store, remember): a small story with
relations, a superseded event, a vector memory and a dream. The page, admin and browser tests share it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.utils import timezone

from memory.longterm.events import events_store
from memory.longterm.strength import Owner, remember
from memory.models import Dream, Event, MemoryItem

START = timezone.make_aware(dt.datetime(2025, 7, 17, 10, 0))


@dataclass
class Story:
    owner: Owner
    port_closed: Event
    delayed: Event
    rerouted: Event
    reopened: Event
    memory: MemoryItem
    dream: Dream


def remember_story(*, user, agent_id: int, key: str | None = None, word: str = "") -> Story:
    """Four events (closed causes delayed, rerouted resolves delayed, reopened supersedes closed), one vector
    memory and one dream for `user` under the agent's key; `word` marks every text (another user's story).
    Call inside the tenant scope."""
    owner = Owner(user_id=user.pk, key=key or f"{agent_id}_{user.pk}", agent_id=agent_id)
    first = events_store(
        owner,
        {
            "new_events": [
                {"event_id": "n1", "actor": "user", "action_type": "report",
                 "content_summary": f"Typhoon closed port Alder{word}",
                 "entities": [{"name": "Port Alder", "type": "PLACE"}]},
                {"event_id": "n2", "actor": "user", "action_type": "report", "status": "pending",
                 "content_summary": f"Order 42 shipment is delayed{word}",
                 "entities": [{"name": "Order 42", "type": "ORDER"}]},
                {"event_id": "n3", "actor": "assistant", "action_type": "decision",
                 "content_summary": f"Rerouted order 42 through port Birch{word}",
                 "entities": [{"name": "Order 42", "type": "ORDER"}, {"name": "Port Birch", "type": "PLACE"}]},
            ],
            "relations": [
                {"source": "n1", "type": "causes", "target": "n2"},
                {"source": "n3", "type": "resolves", "target": "n2"},
            ],
        },
        now=START,
    )  # fmt: skip
    port_closed, delayed, rerouted = first.added
    second = events_store(
        owner,
        {"new_events": [{"event_id": "n1", "actor": "user", "action_type": "report",
                         "content_summary": f"Port Alder reopened on Wednesday{word}",
                         "supersedes": [port_closed.event_id]}]},
        now=START + dt.timedelta(hours=2),
    )  # fmt: skip
    memory = remember(owner, f"Prefers email over phone calls{word}", now=START)
    dream = Dream.objects.create(
        user=user, key=owner.key, text=f"A ship sails through a closed harbour{word}", fragments=["an old fragment"]
    )
    return Story(
        owner=owner,
        port_closed=Event.objects.get(pk=port_closed.pk),
        delayed=Event.objects.get(pk=delayed.pk),
        rerouted=rerouted,
        reopened=second.added[0],
        memory=memory,
        dream=dream,
    )

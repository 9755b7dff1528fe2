"""Seed 3's vector memory: U(memory) = remember, R(query) = recall, S() = sleep, with its level rules.

- remember(text): stored with the time and level 0 (the same text again is the same memory: its time is renewed).
- recall(query): the owner's memories are retrieved (hybrid, MEMORY_RECALL_CANDIDATES), re-ranked (relevance,
  then strength), and the top MEMORY_RECALL_TOP_N returned. A returned memory gets the recall time; if it was at
  level 0, or the time since its last write/recall is more than its gap, its level rises by one. The gap grows
  exponentially with the level (MEMORY_GAP_SECONDS * MEMORY_GAP_FACTOR ** level); a memory that reaches
  MEMORY_LEVEL_CAP is long-term and its level no longer changes. Retrieved memories that did not make the top n
  and are not long-term sink one level when the time since their last write/recall is more than their gap; at
  level -1 they are deleted.
- sleep(): MEMORY_SLEEP_SAMPLE random memories get the same sinking rule; the deleted ones become a short "dream"
  written by the execution-tier model (the fragments joined by a separator).

`now` is a parameter everywhere (the clock is injectable; tests drive it).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass

from asgiref.sync import async_to_sync
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.conf import setting
from llm.client import complete_chat
from llm.errors import LLMError
from llm.messages import ChatMessage
from llm.models import Purpose, Tier
from llm.options import ChatRequest
from llm.selectors import model_for_tier
from memory.longterm import metrics, store
from memory.models import Dream, MemoryItem

logger = logging.getLogger(__name__)

DREAM_SEPARATOR = "\n---\n"
DREAM_TASK = (
    "根据碎片的信息，生成一段梦境。Write a short dream (at most 120 words, in the fragments' language) that weaves "
    "these forgotten fragments together. Reply with the dream only."
)


def gap(level: int) -> dt.timedelta:
    """How long a memory at `level` must go unrecalled before recalling it strengthens it (or passing it over
    weakens it): exponential in the level, fixed from the cap on."""
    capped = min(max(level, 0), int(setting("MEMORY_LEVEL_CAP")))
    return dt.timedelta(seconds=float(setting("MEMORY_GAP_SECONDS")) * float(setting("MEMORY_GAP_FACTOR")) ** capped)


def strengthen(item: MemoryItem, now: dt.datetime) -> None:
    """A returned memory (in memory, not saved): the recall time, and one level up when due."""
    elapsed = now - item.time
    item.time = now
    item.recalls += 1
    if item.long_term:
        return
    if item.level <= 0 or elapsed > gap(item.level):
        item.level = max(item.level, 0) + 1
    if item.level >= int(setting("MEMORY_LEVEL_CAP")):
        item.level = int(setting("MEMORY_LEVEL_CAP"))
        item.long_term = True


def weaken(item: MemoryItem, now: dt.datetime) -> bool:
    """A memory passed over (retrieved but not returned, or drawn by sleep), in memory: one level down when its
    gap has passed. Returns True when it reached -1 and must be deleted. Long-term memories never change."""
    if item.long_term:
        return False
    if now - item.time > gap(item.level):
        item.level -= 1
    return item.level <= -1


@dataclass(frozen=True)
class Owner:
    """Whose memory: a tenant's user, under one memory key (the agent's, or a plan step's seed-0 key)."""

    user_id: int
    key: str
    agent_id: int | None = None


def remember(
    owner: Owner, text: str, *, now: dt.datetime | None = None, conversation_id: int | None = None
) -> MemoryItem:
    """U(memory): store `text` at level 0 with the time (call inside the tenant scope)."""
    now = now or timezone.now()
    text = (text or "").strip()
    if not text:
        raise ValueError("An empty memory cannot be stored.")
    digest = store.text_hash(text)
    existing = MemoryItem.objects.filter(user_id=owner.user_id, key=owner.key, text_hash=digest).first()
    if existing is not None:
        existing.time = now
        existing.save(update_fields=["time"])
        return existing
    try:
        with transaction.atomic():
            return MemoryItem.objects.create(
                user_id=owner.user_id,
                key=owner.key,
                text=text,
                text_hash=digest,
                time=now,
                level=0,
                conversation_id=conversation_id,
                **store.search_fields(text),
            )
    except IntegrityError:  # the same text stored by a concurrent call
        return MemoryItem.objects.get(user_id=owner.user_id, key=owner.key, text_hash=digest)


@dataclass(frozen=True)
class RecallResult:
    returned: list[MemoryItem]
    weakened: list[MemoryItem]
    deleted: list[str]


def recall(
    owner: Owner,
    query: str,
    *,
    now: dt.datetime | None = None,
    top_n: int | None = None,
    candidates: int | None = None,
) -> RecallResult:
    """R(query): the top n memories for `query`, with seed 3's level changes written (one transaction)."""
    now = now or timezone.now()
    top_n = int(setting("MEMORY_RECALL_TOP_N")) if top_n is None else top_n
    candidates = int(setting("MEMORY_RECALL_CANDIDATES")) if candidates is None else candidates
    ranked = store.rank(MemoryItem, query, top_k=max(candidates, top_n), user_id=owner.user_id, key=owner.key)
    if not ranked:
        return RecallResult([], [], [])
    relevance = dict(ranked)
    with transaction.atomic():
        items = list(
            MemoryItem.objects.select_for_update().filter(user_id=owner.user_id, key=owner.key, id__in=list(relevance))
        )
        # The re-rank: relevance first; between equally relevant memories, the stronger one.
        items.sort(key=lambda item: (-round(relevance[item.pk], 6), -item.level, -item.pk))
        returned, passed = items[:top_n], items[top_n:]
        for item in returned:
            strengthen(item, now)
        deleted, weakened = [], []
        for item in passed:
            before = item.level
            if weaken(item, now):
                deleted.append(item)
            elif item.level != before:
                weakened.append(item)
        changed = returned + weakened
        if changed:
            MemoryItem.objects.bulk_update(changed, ["time", "level", "long_term", "recalls"])
        if deleted:
            MemoryItem.objects.filter(id__in=[item.pk for item in deleted]).delete()
    return RecallResult(returned=returned, weakened=weakened, deleted=[item.text for item in deleted])


def sleep_sample(
    owner: Owner, *, now: dt.datetime | None = None, sample: int | None = None, rng: random.Random | None = None
) -> list[str]:
    """The forgetting half of S(): draw `sample` random memories, weaken them, delete those at -1; returns the
    deleted texts (the dream's fragments)."""
    now = now or timezone.now()
    sample = int(setting("MEMORY_SLEEP_SAMPLE")) if sample is None else sample
    ids = list(MemoryItem.objects.filter(user_id=owner.user_id, key=owner.key).values_list("id", flat=True))
    chosen = (rng or random.SystemRandom()).sample(ids, min(sample, len(ids)))
    deleted: list[MemoryItem] = []
    with transaction.atomic():
        items = list(MemoryItem.objects.select_for_update().filter(id__in=chosen).order_by("id"))
        weakened = []
        for item in items:
            before = item.level
            if weaken(item, now):
                deleted.append(item)
            elif item.level != before:
                weakened.append(item)
        if weakened:
            MemoryItem.objects.bulk_update(weakened, ["level"])
        if deleted:
            MemoryItem.objects.filter(id__in=[item.pk for item in deleted]).delete()
    return [item.text for item in deleted]


def dream_of(*, tenant, fragments: Sequence[str], agent_id: int | None = None) -> str:
    """M1(task, context): the execution-tier model turns forgotten fragments into a short dream."""
    choice = model_for_tier(tenant=tenant, tier=Tier.EXECUTION)
    if choice is None:
        raise LLMError("bad_request", detail="no model provider for dreams")
    result = async_to_sync(complete_chat)(
        ChatRequest(messages=[ChatMessage.system(DREAM_TASK), ChatMessage.user(DREAM_SEPARATOR.join(fragments))]),
        tenant=tenant,
        provider=choice.provider,
        model=choice.model,
        purpose=Purpose.EXTRACT,
        agent_id=agent_id,
    )
    return result.text.strip()


def sleep(
    owner: Owner, *, tenant, now: dt.datetime | None = None, sample: int | None = None, rng: random.Random | None = None
) -> str:
    """S(): forget as seed 3 says, then dream of what was forgotten (empty when nothing was). The dream is kept
    (the memory page and the goal agent's page show it)."""
    fragments = sleep_sample(owner, now=now, sample=sample, rng=rng)
    if not fragments:
        return ""
    try:
        text = dream_of(tenant=tenant, fragments=fragments, agent_id=owner.agent_id)
    except LLMError as exc:
        logger.warning("dream of %s fragments failed: %s", len(fragments), exc)
        text = ""
    Dream.objects.create(user_id=owner.user_id, key=owner.key, text=text, fragments=list(fragments))
    metrics.count(agent_id=owner.agent_id, dreams=1, forgotten=len(fragments))
    return text

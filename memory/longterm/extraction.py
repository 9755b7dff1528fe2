"""The work after a turn (index, extract, store, count) and sleep for everyone: what memory.tasks runs."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from django.db.models.functions import Substr
from django.utils import timezone

from llm.client import complete_chat
from llm.errors import LLMError
from llm.messages import ChatMessage
from llm.models import Purpose, Tier
from llm.options import ChatRequest
from llm.selectors import model_for_tier
from memory.longterm import events as event_graph
from memory.longterm import metrics, strength
from memory.longterm.recall import owner_of, turn_index
from memory.models import Attachment, Conversation, MemoryItem, Message
from tenants.models import Tenant
from tenants.scope import all_tenants, tenant_scope

logger = logging.getLogger(__name__)

MODES = ("model", "rules", "combined")


def turn_memory_extract(
    *,
    conversation: Conversation,
    user_message_id: int,
    reply_message_id: int | None,
    mode: str,
    answer: str | None = None,
) -> str:
    """Index the exchange and extract its events; returns what happened ("stored", "skipped", ...). Mode
    `combined` reads the events from `answer`, the model's whole JSON answer of the turn (no call when it is
    valid; the one repair call when it is not, or when the model answered in prose)."""
    messages = Message.objects.in_bulk([pk for pk in (user_message_id, reply_message_id) if pk])
    user_message, reply = messages.get(user_message_id), messages.get(reply_message_id) if reply_message_id else None
    if user_message is None:
        return "gone"
    user_message.content = with_shared_files(user_message)
    turn_index(conversation, user_message=user_message, reply=reply)
    owner = owner_of(conversation)
    now = timezone.now()
    if mode == "rules":
        added = duplicates = 0
        for message in (user_message, reply):
            if message is None or not message.content.strip():
                continue
            extracted = {"new_events": event_graph.rule_events(actor=message.role, text=message.content)}
            outcome = event_graph.events_store(
                owner, extracted, conversation_id=conversation.pk, source_message_ids=[message.pk], now=now,
                link_entities=True,
            )  # fmt: skip
            added += len(outcome.added)
            duplicates += outcome.duplicates
        metrics.count(agent_id=owner.agent_id, extractions=1, events_added=added, duplicates=duplicates)
        return "stored"
    exchange = f"User: {user_message.content}" + (f"\nAssistant: {reply.content}" if reply is not None else "")
    choice = model_for_tier(tenant=conversation.tenant, tier=Tier.EXECUTION, provider=conversation.provider)
    if choice is None:
        metrics.count(agent_id=owner.agent_id, skipped=1)
        return "skipped"

    def complete(request: list[ChatMessage]) -> str:
        result = async_to_sync(complete_chat)(
            ChatRequest(messages=request, temperature=0), tenant=conversation.tenant, provider=choice.provider,
            model=choice.model, purpose=Purpose.EXTRACT, agent_id=conversation.agent_id,
            conversation_id=conversation.pk,
        )  # fmt: skip
        return result.text

    try:
        known = event_graph.known_events_text(owner, user_message.content)
        extraction = event_graph.extract_with_model(
            complete=complete, known=known, exchange=exchange, now=now,
            first_answer=(answer or "") if mode == "combined" else None,
        )  # fmt: skip
    except LLMError as exc:
        logger.warning("event extraction of conversation %s failed: %s", conversation.pk, exc)
        metrics.count(agent_id=owner.agent_id, skipped=1)
        return "skipped"
    if extraction.data is None:
        logger.info("event extraction of conversation %s skipped: %s", conversation.pk, extraction.error)
        metrics.count(agent_id=owner.agent_id, skipped=1, repaired=1)
        return "skipped"
    outcome = event_graph.events_store(
        owner, extraction.data, conversation_id=conversation.pk,
        source_message_ids=[pk for pk in (user_message_id, reply_message_id) if pk], now=now,
    )  # fmt: skip
    metrics.count(
        agent_id=owner.agent_id, extractions=1, events_added=len(outcome.added), repaired=int(extraction.repaired),
        duplicates=outcome.duplicates, superseded=outcome.superseded,
    )  # fmt: skip
    return "stored"


# How much of a shared file's text says what it is about (its first line, cut): its name and this are remembered,
# never its text.
ABOUT_CHARS = 80


def with_shared_files(message: Message) -> str:
    """A user message's text as memory reads it: with a line per file it shared (name, kind, what it is about)."""
    rows = (
        Attachment.objects.filter(message_id=message.pk)
        .annotate(head=Substr("text", 1, 400))
        .values_list("name", "kind", "pages", "head")
    )
    lines = []
    for name, kind, pages, head in rows:
        about = next((line.strip() for line in (head or "").splitlines() if line.strip()), "")
        about = about if len(about) <= ABOUT_CHARS else about[: ABOUT_CHARS - 1] + "…"
        size = f", {pages} pages" if pages else ""
        lines.append(f"[Shared {kind} / 分享的文件: {name}{size}" + (f" — about: {about}]" if about else "]"))
    return "\n".join([message.content, *lines]).strip() if lines else message.content


def sleep_everyone(*, sample: int | None = None) -> int:
    """S() for each (tenant, user, key) that has vector memories."""
    with all_tenants(reason="scheduled sleep of every tenant's vector memories"):
        owners = list(MemoryItem.objects.values_list("tenant_id", "user_id", "key").distinct())
        tenants = Tenant.objects.in_bulk({tenant_id for tenant_id, _, _ in owners})
    slept = 0
    for tenant_id, user_id, key in owners:
        tenant = tenants.get(tenant_id)
        if tenant is None:
            continue
        agent_id = int(key.split("_", 1)[0]) if key.split("_", 1)[0].isdigit() else None
        with tenant_scope(tenant):
            strength.sleep(strength.Owner(user_id=user_id, key=key, agent_id=agent_id), tenant=tenant, sample=sample)
        slept += 1
    return slept

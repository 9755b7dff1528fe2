"""Background work of conversation memory: writing summaries (seed 4, 5.1)."""

from __future__ import annotations

import logging

from celery import shared_task

from llm.errors import LLMError
from memory.attachments import attachments_delete_expired
from memory.counters import overflow_metric_add
from memory.longterm.extraction import sleep_everyone, turn_memory_extract
from memory.models import Conversation
from memory.summaries import conversation_summarize, conversation_summary_failed
from tenants.taskscope import tenant_task

logger = logging.getLogger(__name__)


@shared_task(
    bind=True,
    autoretry_for=(LLMError,),
    retry_backoff=5,
    retry_backoff_max=120,
    retry_jitter=True,
    max_retries=3,
    # A worker that dies while it writes a summary must not lose it. Acknowledged only once it ends, so a message
    # whose worker vanished is delivered again by the broker (Redis: after CELERY_VISIBILITY_TIMEOUT, to a restarted
    # or another worker); and a pool process killed under a living worker puts it back in the queue at once instead
    # of acknowledging it as failed (Celery's default). Safe to run twice: conversation_summarize does nothing when
    # the messages were summarised meanwhile.
    acks_late=True,
    reject_on_worker_lost=True,
)
@tenant_task()
def summarize_conversation(self, tenant_id: int, conversation_id: int, message_ids: list[int]) -> str:
    """Summarise `message_ids` of a conversation; after the last retry, count the failure and clear the flag. A
    delivery after a lost worker counts as a retried summary."""
    conversation = Conversation.objects.select_related("tenant", "provider").filter(pk=conversation_id).first()
    if conversation is None:
        return "gone"
    if (self.request.delivery_info or {}).get("redelivered"):
        logger.warning("summary of conversation %s delivered again: its worker was lost", conversation_id)
        overflow_metric_add(tenant_id=tenant_id, agent_id=conversation.agent_id, summaries_retried=1)
    try:
        done = conversation_summarize(conversation=conversation, message_ids=message_ids)
    except LLMError as exc:
        if exc.retryable and self.request.retries < self.max_retries:
            if self.request.is_eager:
                # Eager mode (the embedded default, tests) cannot schedule a retry, and with eager propagation
                # celery would raise Retry into the chat turn that queued this: try again now instead.
                retry = self.apply(args=(tenant_id, conversation_id, message_ids), retries=self.request.retries + 1)
                return retry.result
            raise  # autoretry_for schedules the next attempt, with backoff
        logger.warning("summary of conversation %s failed for good: %s", conversation_id, exc)
        conversation_summary_failed(conversation=conversation)
        return "failed"
    return "summarized" if done else "nothing to do"


@shared_task(name="memory.extract_turn_memory")
@tenant_task()
def extract_turn_memory(
    tenant_id: int,
    conversation_id: int,
    user_message_id: int,
    reply_message_id: int | None,
    mode: str,
    answer: str | None = None,
) -> str:
    """After a turn: index it (M7) and extract its events (M5) by `mode` ("model", "rules", or "combined" with the
    model's whole JSON `answer`). Never raises for a model failure: the extraction is skipped and counted."""
    conversation = Conversation.objects.select_related("tenant", "provider").filter(pk=conversation_id).first()
    if conversation is None:
        return "gone"
    return turn_memory_extract(
        conversation=conversation, user_message_id=user_message_id, reply_message_id=reply_message_id, mode=mode,
        answer=answer,
    )  # fmt: skip


@shared_task(name="memory.sleep_all")
def sleep_all(sample: int | None = None) -> int:
    """Seed 3's S() for every memory key of every tenant (Celery beat runs it; the admin shows the schedule).
    Returns how many memory keys slept."""
    return sleep_everyone(sample=sample)


@shared_task(name="memory.attachments_expire")
def attachments_expire() -> int:
    """Delete conversations' files older than ATTACHMENT_RETENTION_DAYS (their messages stay), and uploads never
    sent with a message after a day; Celery beat runs it daily. Returns how many files were deleted."""
    return attachments_delete_expired()

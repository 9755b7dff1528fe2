"""Writing a conversation's summary (seed 4, 5.1): what memory.tasks.summarize_conversation runs."""

from __future__ import annotations

from collections.abc import Sequence

from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils.translation import gettext

from llm import errors
from llm.client import complete_chat
from llm.errors import LLMError
from llm.models import ModelProvider, Purpose
from llm.options import ChatRequest
from llm.selectors import default_provider
from memory import overflow
from memory.counters import overflow_metric_add
from memory.models import Conversation, ConversationContext
from memory.stored import active_stored


def _summary_model(conversation: Conversation) -> tuple[ModelProvider, str]:
    provider = conversation.provider or default_provider(tenant=conversation.tenant)
    if provider is None:
        raise LLMError(
            errors.BAD_REQUEST,
            gettext(
                "This tenant has no model provider to write summaries: add one in Admin › Models › Model providers."
            ),
        )
    return provider, conversation.model or provider.default_chat_model


def conversation_summarize(*, conversation: Conversation, message_ids: Sequence[int]) -> bool:
    """Merge the still-active `message_ids` into the summary and take them out of the context (seed 4, 5.1).

    Returns False when there was nothing left to do (a duplicate task). Raises LLMError when the model fails;
    the model is called outside any lock or transaction.
    """
    context = ConversationContext.objects.get(conversation=conversation)
    wanted = [pk for pk in message_ids if pk in set(context.active_messages)]
    if not wanted:
        return False
    previous = context.summary
    messages, _unloaded = active_stored(wanted, conversation)
    provider, model = _summary_model(conversation)
    result = async_to_sync(complete_chat)(
        ChatRequest(messages=overflow.summary_prompt(previous_summary=previous, messages=messages), temperature=0.2),
        tenant=conversation.tenant,
        provider=provider,
        model=model,
        purpose=Purpose.SUMMARY,
        agent_id=conversation.agent_id,
        conversation_id=conversation.pk,
    )
    text = result.text.strip()
    if not text:
        raise LLMError(errors.PROVIDER_ERROR, detail="the model answered the summary request with no text")
    with transaction.atomic():
        context = ConversationContext.objects.select_for_update().get(pk=context.pk)
        still = set(context.active_messages)
        if context.summary != previous or not all(pk in still for pk in wanted):
            return False  # another task summarised meanwhile; its summary stands
        done = set(wanted)
        context.summary = text
        context.active_messages = [pk for pk in context.active_messages if pk not in done]
        context.summarized_through = max(wanted)
        context.summary_pending = False
        context.save(
            update_fields=["summary", "active_messages", "summarized_through", "summary_pending", "updated_at"]
        )
        overflow_metric_add(tenant_id=conversation.tenant_id, agent_id=conversation.agent_id, summaries_made=1)
    return True


def conversation_summary_failed(*, conversation: Conversation) -> None:
    """The summary could not be written: count it and let the next turn queue another (the window still applies)."""
    with transaction.atomic():
        ConversationContext.objects.filter(conversation=conversation).update(summary_pending=False)
        overflow_metric_add(tenant_id=conversation.tenant_id, agent_id=conversation.agent_id, summaries_failed=1)

"""Reads of the chat page: the conversation list, one conversation for a viewer, its history with the markers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractBaseUser

from agents.models import Agent
from chat.markdown import render_markdown
from chat.streams import get_frame_log
from llm.errors import message_for
from memory.models import Conversation, ConversationContext, Message, MessageStatus, Role
from memory.overflow import STRATEGY_SUMMARIZE


def conversation_list(*, user: AbstractBaseUser) -> list[Conversation]:
    """The scope's conversations of `user`, newest first (admins open others' by URL, the list shows their own)."""
    return list(Conversation.objects.filter(user=user).select_related("agent").order_by("-updated_at", "-pk")[:200])


def agents_for_new_conversation() -> list[Agent]:
    """The scope's active agents a conversation can start with."""
    return list(Agent.objects.filter(active=True).only("id", "name", "description").order_by("name"))


def conversation_for_viewer(*, conversation_id: int, user: AbstractBaseUser, can_administer: bool) -> Conversation:
    """The scope's conversation `conversation_id` if `user` may read it: their own, or any when they administer
    the tenant. Conversation.DoesNotExist otherwise (another tenant's id or another member's conversation)."""
    conversations = Conversation.objects.select_related("agent", "context", "user")
    if not can_administer:
        conversations = conversations.filter(user=user)
    return conversations.get(pk=conversation_id)


@dataclass
class HistoryItem:
    """One stored message as the page shows it."""

    message: Message
    html: str = ""
    tool_names: list[str] = field(default_factory=list)
    # For a tool result: the name of the tool whose call it answers.
    tool_name: str = ""

    @property
    def role(self) -> str:
        return self.message.role

    @property
    def usage(self) -> dict[str, Any] | None:
        usage = self.message.usage
        return usage if isinstance(usage, dict) and usage else None

    @property
    def is_incomplete(self) -> bool:
        return self.message.status in (MessageStatus.PARTIAL, MessageStatus.ERROR)

    @property
    def error_message(self) -> str:
        return message_for(self.message.error_code) if self.message.error_code else ""


@dataclass
class EarlierMarker:
    """Where the model's context starts: the messages before it were summarised or dropped by the window."""

    count: int
    summarised: bool
    summary: str


@dataclass
class ChatHistory:
    items: list[HistoryItem]
    marker: EarlierMarker | None
    # The marker goes before the item at this position.
    marker_position: int = 0


def _earlier_marker(messages: list[Message], context: ConversationContext | None) -> tuple[EarlierMarker | None, int]:
    if context is None:
        return None, 0
    active = set(context.active_messages or [])
    first_active = next((i for i, message in enumerate(messages) if message.pk in active), len(messages))
    # Failed replies never enter the context: they are not "earlier messages" the strategy took out.
    earlier = [
        message
        for message in messages[:first_active]
        if message.pk not in active and message.status != MessageStatus.ERROR and message.role != Role.SYSTEM
    ]
    if not earlier:
        return None, 0
    summarised = bool(context.summary) and (
        context.strategy == STRATEGY_SUMMARIZE
        or (context.summarized_through is not None and earlier[-1].pk <= context.summarized_through)
    )
    return EarlierMarker(count=len(earlier), summarised=summarised, summary=context.summary), first_active


def chat_history(*, conversation: Conversation) -> ChatHistory:
    """Every message of the conversation, oldest first, with replies rendered and the earlier-messages marker."""
    messages = list(Message.objects.filter(conversation=conversation).order_by("id"))
    items = []
    call_names: dict[str, str] = {}
    for message in messages:
        if message.role == Role.SYSTEM:
            continue
        item = HistoryItem(message=message)
        if message.role == Role.ASSISTANT:
            item.html = render_markdown(message.content) if message.content else ""
            for call in message.tool_calls or []:
                if not isinstance(call, dict):
                    continue
                name = str((call.get("function") or {}).get("name") or call.get("name") or "")
                item.tool_names.append(name)
                call_names[str(call.get("id") or "")] = name
        elif message.role == Role.TOOL:
            item.tool_name = call_names.get(message.tool_call_id, "")
        items.append(item)
    context = getattr(conversation, "context", None)
    marker, first_active = _earlier_marker(messages, context)
    if marker is None:
        return ChatHistory(items=items, marker=None)
    first_active_pk = messages[first_active].pk if first_active < len(messages) else None
    position = next((i for i, item in enumerate(items) if item.message.pk == first_active_pk), len(items))
    return ChatHistory(items=items, marker=marker, marker_position=position)


async def _resume_seq(conversation_id: int) -> int:
    log = get_frame_log()
    last = await log.last_seq(conversation_id)
    running = await log.running_turn(conversation_id)
    if running is None:
        return last
    # A reply is being written: the page has its user message (stored) but not the reply, so the socket
    # replays from that turn's user_message frame on.
    for frame in reversed(await log.after(conversation_id, 0)):
        if frame.get("type") == "user_message" and frame.get("message_id") == running:
            return int(frame["seq"])
    return last


def stream_resume_seq(*, conversation_id: int) -> int:
    """The seq after which the page's socket asks for frames (catch_up): what the rendered history already shows."""
    return async_to_sync(_resume_seq)(conversation_id)

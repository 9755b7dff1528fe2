"""Reads of the chat page: the conversation list, one conversation for a viewer, its history with the markers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractBaseUser

from agents import frames
from agents.config import conversation_config
from agents.limits import MessageLimit, message_limit
from agents.models import Agent
from agents.progress import ProgressLine, step_status_labels
from agents.tools import tool_labels
from core.markdown import render_markdown
from engine.streams import get_frame_log
from llm.errors import message_for
from memory.attachments import attachment_info
from memory.models import (
    Attachment,
    Conversation,
    ConversationContext,
    ConversationSource,
    Feedback,
    Message,
    MessageStatus,
    Role,
)
from memory.overflow import STRATEGY_SUMMARIZE
from plans.models import Plan
from toolservers.models import FUNCTION_PREFIX


def conversation_list(*, user: AbstractBaseUser, with_tests: bool = False) -> list[Conversation]:
    """The scope's conversations of `user`, newest first (admins open others' by URL, the list shows their own);
    test conversations of a draft only `with_tests` (for an administrator: a member opens none)."""
    conversations = Conversation.objects.filter(user=user, parent__isnull=True)  # a plan step's are internal
    conversations = conversations.exclude(source=ConversationSource.EVAL)  # an evaluation run's: its own pages
    if not with_tests:
        conversations = conversations.filter(is_test=False)
    return list(conversations.select_related("agent").order_by("-updated_at", "-pk")[:200])


def agents_for_new_conversation() -> list[Agent]:
    """The scope's active agents a conversation can start with: published ones (a draft's changes are not live
    until published, as the agent pages say)."""
    agents = Agent.objects.filter(active=True, versions__isnull=False).distinct()
    return list(agents.only("id", "name", "description").order_by("name"))


def conversation_message_limit(*, conversation: Conversation) -> MessageLimit:
    """The longest message `conversation` takes: its agent's configuration (the version it runs, or the draft of a
    test conversation) against its model's window (agents.limits); the composer and the socket both hold to it."""
    return message_limit(conversation_config(conversation))


@dataclass
class ToolLine:
    """One tool call (or workflow step) of a reply as its progress line: what static/js/chat.js shows live for the
    call's last frame."""

    call_id: str
    name: str
    status: str = "started"
    step_type: str = ""
    tool: str = ""
    # Labels of the tenant's own tools (its MCP tools), which the registry does not hold (chat_history fills it).
    known: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def text(self) -> str:
        """The line in the active language, naming the tool by its label (the identifier is the line's title)."""
        return ProgressLine(self.name, self.status, self.step_type, self.tool, known=self.known).text


@dataclass
class HistoryItem:
    """One stored message as the page shows it. A reply carries the progress lines of the tool calls that led to
    it (in its bubble, as live); the tool-call rounds and their results are not items of their own."""

    message: Message
    html: str = ""
    tools: list[ToolLine] = field(default_factory=list)
    # The viewer's own stored rating of this reply (+1, -1; None: not rated) and its comment.
    rating: int | None = None
    rating_comment: str = ""
    # A user message's files (memory.attachments.attachment_info each), shown as chips and thumbnails.
    attachments: list[dict[str, Any]] = field(default_factory=list)

    @property
    def role(self) -> str:
        return self.message.role

    @property
    def usage(self) -> dict[str, Any] | None:
        usage = self.message.usage
        return usage if isinstance(usage, dict) and usage else None

    @property
    def memories(self) -> list[dict[str, Any]]:
        """The long-term memories recalled for this reply (kind and text), as the turn stored them."""
        usage = self.usage or {}
        memories = usage.get("memories")
        return memories if isinstance(memories, list) else []

    @property
    def cut_at_length(self) -> bool:
        """The agent's longest reply (max_tokens) cut this reply (finish_reason "length", kept in its usage)."""
        return (self.usage or {}).get("finish_reason") == "length"

    def stored_lines(self) -> list[ToolLine]:
        """The progress lines kept with the reply (a workflow agent's steps, agents.runtime.TurnContext.lines)."""
        steps = (self.usage or {}).get("steps")
        if not isinstance(steps, list):
            return []
        fields = ("name", "status", "step_type", "tool")
        return [
            ToolLine(call_id="", **{key: str(step.get(key) or "") for key in fields})
            for step in steps
            if isinstance(step, dict)
        ]

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
        if message.pk not in active
        and message.role != Role.SYSTEM
        and (message.status != MessageStatus.ERROR or message.role == Role.TOOL)  # a failed call's result was sent
    ]
    if not earlier:
        return None, 0
    summarised = bool(context.summary) and (
        context.strategy == STRATEGY_SUMMARIZE
        or (context.summarized_through is not None and earlier[-1].pk <= context.summarized_through)
    )
    return EarlierMarker(count=len(earlier), summarised=summarised, summary=context.summary), first_active


def _is_tool_round(item: HistoryItem) -> bool:
    """An assistant message that only called tools: its lines go to the reply that follows it."""
    message = item.message
    return bool(message.tool_calls) and not item.html and message.status == MessageStatus.COMPLETE


def _ratings(conversation: Conversation, viewer_id: int | None) -> dict[int, tuple[int, str]]:
    """The viewer's ratings of the conversation's replies by message id: (rating, comment); one query."""
    if viewer_id is None:
        return {}
    rows = Feedback.objects.filter(message__conversation=conversation, user_id=viewer_id)
    return {message_id: (rating, comment) for message_id, rating, comment in
            rows.values_list("message_id", "rating", "comment")}  # fmt: skip


def _label_tenant_tools(conversation: Conversation, items: list[HistoryItem]) -> None:
    """Give the lines of the tenant's own tools (MCP tools, `mcp__…`) their labels, as the live page has them; the
    labels are read only when such a line is there."""
    lines = [line for item in items for line in item.tools]
    if not any(name.startswith(FUNCTION_PREFIX) for line in lines for name in (line.name, line.tool)):
        return
    known = tool_labels(tenant=conversation.tenant)
    for line in lines:
        line.known = known


def _attach_files(context: ConversationContext | None, items: list[HistoryItem]) -> None:
    """Each user message's files; a conversation that never had one (its context's count says so) costs no query."""
    if context is None or not context.attachments:
        return
    by_message: dict[int, list[dict[str, Any]]] = {}
    for attachment in Attachment.objects.filter(conversation_id=context.conversation_id, message__isnull=False):
        by_message.setdefault(attachment.message_id, []).append(attachment_info(attachment))
    for item in items:
        if item.role == Role.USER:
            item.attachments = by_message.get(item.message.pk, [])


def chat_history(*, conversation: Conversation, viewer_id: int | None = None) -> ChatHistory:
    """Every message of the conversation, oldest first, with replies rendered, each reply with the progress lines
    of its tool calls (a failed call's result is stored with status error), and the earlier-messages marker; with a
    `viewer_id` (the chat page's user, the widget's visitor), each reply carries that person's stored rating."""
    messages = list(Message.objects.filter(conversation=conversation).order_by("id"))
    ratings = _ratings(conversation, viewer_id)
    items: list[HistoryItem] = []
    lines: dict[str, ToolLine] = {}
    for message in messages:
        if message.role == Role.SYSTEM:
            continue
        if message.role == Role.TOOL and message.tool_call_id in lines:
            failed = message.status == MessageStatus.ERROR
            lines[message.tool_call_id].status = "failed" if failed else "completed"
            continue
        item = HistoryItem(message=message)
        if message.role == Role.ASSISTANT:
            item.rating, item.rating_comment = ratings.get(message.pk, (None, ""))
            item.html = render_markdown(message.content) if message.content else ""
            if items and items[-1].role == Role.ASSISTANT and _is_tool_round(items[-1]):
                item.tools = items.pop().tools  # the rounds before this message, in one bubble as live
            item.tools.extend(item.stored_lines())
            for call in message.tool_calls or []:
                if not isinstance(call, dict):
                    continue
                line = ToolLine(
                    call_id=str(call.get("id") or ""),
                    name=str((call.get("function") or {}).get("name") or call.get("name") or ""),
                )
                item.tools.append(line)
                lines[line.call_id] = line
        items.append(item)
    _label_tenant_tools(conversation, items)
    context = getattr(conversation, "context", None)
    _attach_files(context, items)
    marker, first_active = _earlier_marker(messages, context)
    if marker is None:
        return ChatHistory(items=items, marker=None)
    shown = {item.message.pk for item in items}
    # The marker goes before the first active message the page shows (a tool round's is inside a reply's bubble).
    first_shown = next((m.pk for m in messages[first_active:] if m.pk in shown), None)
    position = next((i for i, item in enumerate(items) if item.message.pk == first_shown), len(items))
    return ChatHistory(items=items, marker=marker, marker_position=position)


async def _resume_seq(conversation_id: int) -> int:
    log = get_frame_log()
    last = await log.last_seq(conversation_id)
    running = await log.running_turn(conversation_id)
    if running is None:
        return last
    # A reply is being written: the page has its user message (stored) but not the reply, so the socket
    # replays from that turn's user_message frame on.
    for logged in reversed(await log.after(conversation_id, 0)):
        if frames.starts_turn(logged.frame, running):
            return logged.seq
    return last


def stream_resume_seq(*, conversation_id: int) -> int:
    """The seq after which the page's socket asks for frames (catch_up): what the rendered history already shows."""
    return async_to_sync(_resume_seq)(conversation_id)


# The plan panel (static/js/chat.js builds the same cards live from `plan` and `step` frames).


@dataclass
class PlanCard:
    """One plan step as a card: what the template renders on reload."""

    index: int
    agent_name: str
    requirement: str
    status: str
    status_label: str
    depends_on: list[int]
    content: str = ""
    intent: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    link: dict[str, str] | None = None

    @cached_property
    def html(self) -> str:
        """The result as the chat bubbles show a reply: Markdown rendered and sanitised (core.markdown), the only
        HTML the card inserts; an interrupted step's question is shown as text in its question box instead."""
        return render_markdown(self.content) if self.content and self.status != "interrupted" else ""


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _safe_url(url: Any) -> str:
    url = str(url or "")
    return url if url.startswith(("/", "http://", "https://")) else ""


def plan_card_result(card: PlanCard, response: Any) -> None:
    """Fill `card` from an agentChatResponse {content, intent, data} or an AgentExecResult {recordId, output, ...}."""
    if isinstance(response, str):
        card.content = response
        return
    if not isinstance(response, dict):
        return
    card.intent = str(response.get("intent") or "")
    content = response.get("content", response.get("output"))
    card.content = content if isinstance(content, str) else ("" if content is None else _cell(content))
    data = response.get("data")
    if data is None and isinstance(response.get("output"), (dict, list)):
        data = response["output"]
    if isinstance(data, list) and data and all(isinstance(row, dict) for row in data):
        columns: list[str] = []
        for row in data:
            columns.extend(str(key) for key in row if str(key) not in columns)
        card.columns = columns
        card.rows = [[_cell(row.get(column)) for column in columns] for row in data]
    elif isinstance(data, dict) and isinstance(data.get("columns"), list) and isinstance(data.get("rows"), list):
        card.columns = [_cell(column) for column in data["columns"]]
        card.rows = [[_cell(value) for value in row] if isinstance(row, list) else [_cell(row)] for row in data["rows"]]
    elif isinstance(data, dict) and data.get("recordId") and _safe_url(data.get("url")):
        card.link = {"url": _safe_url(data["url"]), "title": str(data.get("title") or data["url"])}
    elif data is None and response.get("recordId") and _safe_url(response.get("url")):
        # A stored AgentExecResult (what a reload reads): the report file is on the result itself.
        card.link = {"url": _safe_url(response["url"]), "title": str(response.get("title") or response["url"])}


# A step that has not run yet, or is running again, still holds the result of its earlier run (the question it
# asked before the plan was resumed): that result is not this run's, so its card shows none (as the page does live).
_RUN_NOT_ENDED = frozenset({"not_started", "in_progress"})


def plan_cards(plan: dict[str, Any]) -> list[PlanCard]:
    """An ExecutionPlan dict (seed 0 field names, as in the `plan` frame) as cards ordered by seqNo."""
    labels = step_status_labels()
    cards = []
    for step in plan.get("steps") or []:
        if not isinstance(step, dict):
            continue
        try:
            index = int(step.get("seqNo"))
        except (TypeError, ValueError):
            continue
        status = str(step.get("status") or "not_started")
        depends = [int(d) for d in step.get("depends_on") or [] if str(d).isdigit()]
        card = PlanCard(
            index=index,
            agent_name=str(step.get("agentName") or ""),
            requirement=str(step.get("requirement") or ""),
            status=status,
            status_label=labels.get(status, status),
            depends_on=depends,
        )
        if status not in _RUN_NOT_ENDED:
            plan_card_result(card, step.get("result"))
        cards.append(card)
    return sorted(cards, key=lambda card: card.index)


def conversation_plan(*, conversation: Conversation) -> dict[str, Any] | None:
    """The latest plan as {"plan_id", "status", "cards"} for the page; None without a plan."""
    plan = Plan.objects.filter(tenant_id=conversation.tenant_id, conversation=conversation).order_by("-pk").first()
    if plan is None:
        return None
    data = plan.as_execution_plan()
    return {
        "plan_id": str(data.get("planId") or ""),
        "status": str(data.get("status") or ""),
        "cards": plan_cards(data),
    }

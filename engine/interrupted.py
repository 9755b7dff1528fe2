"""Turns whose process died, and what a turn left behind (its reply, its logged frames).

A turn runs in the process that received its message. If that process dies (killed, out of memory, its machine
lost), nothing ends the turn: no reply is stored and the pages never get `done`. Its claim is a lease the running
turn renews; once the lease has run out without a release, any process may adopt the turn and end it as
`interrupted`, with what the frame log kept of the reply. Each process looks at the conversations its sockets
watch (engine.bus.Hub, every third of a lease, and when a conversation's first socket connects), and a new message
ends its conversation's dead turn before it is stored (engine.turns).

It writes its frames through the sinks, below the hub that calls it and the turns that call it.
"""

from __future__ import annotations

import logging

from agents import frames
from core.db import database_sync_to_async
from engine.sinks import ChannelSink
from engine.streams import FrameLog
from llm import errors
from memory.models import Conversation, Message, MessageStatus, Role
from memory.services import assistant_message_finish
from plans.models import Plan, PlanStatus
from plans.services import plan_set_status
from tenants.scope import all_tenants, tenant_scope

logger = logging.getLogger("engine.turns")


def reply_to(conversation: Conversation, message: Message) -> Message | None:
    """The reply to a user message: the turn's last assistant message without tool calls (a tool-using turn stores
    tool-call rounds before the answer), up to the next user message."""
    turn = Message.objects.filter(conversation=conversation, pk__gt=message.pk)
    next_user = turn.filter(role=Role.USER).order_by("id").values_list("pk", flat=True).first()
    if next_user is not None:
        turn = turn.filter(pk__lt=next_user)
    return turn.filter(role=Role.ASSISTANT, tool_calls__isnull=True).order_by("-id").first()


def turn_frames(logged: list[frames.Logged], message_id: int) -> list[frames.Logged]:
    """The logged frames of one turn: from its user_message frame up to the next user_message frame."""
    start = next((n for n, entry in enumerate(logged) if frames.starts_turn(entry.frame, message_id)), None)
    if start is None:
        return []
    end = next((n for n in range(start + 1, len(logged)) if frames.starts_turn(logged[n].frame)), len(logged))
    return logged[start:end]


async def end_interrupted_turns(log: FrameLog, conversation_ids: list[int]) -> int:
    """End the turns of these conversations whose process died; returns how many. Each one's reply is stored as
    partial (what the log kept of its text) or error, with the code `interrupted`, and its pages get the frames a
    failed turn ends with. A turn that had stored its reply before its process died gets its `done` instead."""
    return await end_adopted_turns(log, await log.adopt_orphans(conversation_ids))


async def end_adopted_turns(log: FrameLog, adopted: list[tuple[int, int]]) -> int:
    """End these (conversation, turn) pairs adopted from processes that died (end_interrupted_turns), then release
    each; returns how many."""
    for conversation_id, turn_id in adopted:
        try:
            await _end_interrupted(log, conversation_id, turn_id)
        except Exception:  # the lease runs out again, and the next look tries again
            logger.exception("could not end the interrupted turn %s of conversation %s", turn_id, conversation_id)
            continue
        try:
            await log.release_turn(conversation_id, turn_id)
        except Exception:
            logger.warning("interrupted turn not released conversation=%s", conversation_id, exc_info=True)
    return len(adopted)


def _interrupted_text(logged: list[frames.Logged]) -> str:
    """The reply text a turn had streamed: its own (index 0) deltas after its last tool round, whose text is stored
    with that round."""
    text: list[str] = []
    for frame in (entry.frame for entry in logged):
        if isinstance(frame, frames.Delta) and frame.index == 0:
            text.append(frame.content)
        elif isinstance(frame, frames.Tool) and frame.index == 0:
            text = []
    return "".join(text)


def _store_interrupted(conversation_id: int, turn_id: int, text: str) -> tuple[Message | None, bool]:
    """The reply of a dead turn: the one it stored (True), else a new one with the code `interrupted` (False). A plan
    the turn left running fails. (None, False) when the conversation or the message is gone."""
    with all_tenants(reason="chat: end a turn whose process died (the conversation's tenant is not known yet)"):
        conversation = Conversation.objects.select_related("tenant").filter(pk=conversation_id).first()
    if conversation is None:
        return None, False
    with tenant_scope(conversation.tenant):
        message = Message.objects.filter(conversation=conversation, pk=turn_id, role=Role.USER).first()
        if message is None:
            return None, False
        reply = reply_to(conversation, message)
        if reply is not None:
            return reply, True
        for plan in Plan.objects.filter(conversation=conversation, status=PlanStatus.RUNNING):
            plan_set_status(plan=plan, status=PlanStatus.FAILED)
        reply = assistant_message_finish(conversation=conversation, content=text, error_code=errors.INTERRUPTED)
        return reply, False


async def _end_interrupted(log: FrameLog, conversation_id: int, turn_id: int) -> None:
    logged = turn_frames(await log.after(conversation_id, 0), turn_id)
    if any(frames.ends_turn(entry.frame) for entry in logged):
        return  # it ended; only its release was lost
    text = _interrupted_text(logged)
    reply, stored = await database_sync_to_async(_store_interrupted)(conversation_id, turn_id, text)
    if reply is None:
        return
    sink = ChannelSink(conversation_id, log)
    if stored:
        usage = reply.usage or {}
        tokens = frames.usage_dict(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
        await sink.emit(frames.Done(message_id=reply.pk, status=reply.status, usage=tokens, content=reply.content))
        return
    logger.warning("turn %s of conversation %s ended as interrupted: its process died", turn_id, conversation_id)
    partial = reply.status == MessageStatus.PARTIAL
    if partial:
        await sink.emit(frames.Done(message_id=reply.pk, status=reply.status, usage=frames.usage_dict(), content=text))
    await sink.emit(
        frames.Error(
            code=errors.INTERRUPTED,
            message=errors.message_for(errors.INTERRUPTED),
            message_id=reply.pk if partial else None,
            user_message_id=turn_id,
        )
    )

"""Turns started from the chat websocket: store the user message, claim the conversation, run the turn as an asyncio
task of this process (not tied to the socket), and stop it when any socket of the conversation asks.

A process runs at most CHAT_MAX_TURNS turns at once; up to CHAT_TURN_QUEUE more wait for a place, served round-robin
by tenant (one tenant's many chats do not starve another's one); beyond that a message is refused before it is
stored, with a retry hint (`overloaded`)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from django.db import IntegrityError

from agents import frames
from agents.runtime import Sink, TurnResult, run_turn
from agents.sinks import TeeSink
from core.conf import setting
from core.db import database_sync_to_async
from core.loopscoped import LoopScoped
from engine.bus import hub_for
from engine.interrupted import end_adopted_turns, reply_to, turn_frames
from engine.sinks import ChannelSink
from engine.streams import FrameLog, get_frame_log, turn_lease_seconds
from llm.messages import ChatMessage
from llm.options import CallOptions
from memory.attachments import MessageFiles, attachment_info
from memory.models import Conversation, Message, Role
from memory.services import ToolResultsPending, message_add, messages_import, user_message_add

logger = logging.getLogger("engine.turns")

# How often a running turn renews its claim in the frame log (six times per lease: streams.turn_lease_seconds) and
# reads the stop flag (in case the stop message was published while this process's bus was reconnecting).
RENEWALS_PER_LEASE = 6

# How long a new message waits for the conversation's previous turn to release its claim before it is "busy".
CLAIM_GRACE_SECONDS = 0.5
# How much longer it waits when that turn has logged its last frame (done or error) and is only winding down (its
# memory work queued, its claim released): on a process that busy, the release can come later than the grace.
WIND_DOWN_SECONDS = 10.0

_tasks: set[asyncio.Task] = set()


class TurnGate:
    """This event loop's places for running turns (CHAT_MAX_TURNS, 0: unlimited) and its bounded waiting line
    (CHAT_TURN_QUEUE), one line per tenant, served in turn."""

    def __init__(self) -> None:
        self.running = 0
        self.lines: dict[int, deque[asyncio.Future]] = {}
        self.order: deque[int] = deque()  # tenants with someone waiting, next to be served first

    @property
    def waiting(self) -> int:
        return sum(len(line) for line in self.lines.values())

    def has_room(self) -> bool:
        capacity = setting("CHAT_MAX_TURNS")
        return capacity <= 0 or self.running + self.waiting < capacity + setting("CHAT_TURN_QUEUE")

    async def acquire(self, tenant_id: int) -> None:
        capacity = setting("CHAT_MAX_TURNS")
        if capacity <= 0 or (self.running < capacity and not self.order):
            self.running += 1
            return
        future = asyncio.get_running_loop().create_future()
        line = self.lines.setdefault(tenant_id, deque())
        if not line:
            self.order.append(tenant_id)
        line.append(future)
        try:
            await future  # release() counted us as running when it woke us
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()
            else:
                self._forget(tenant_id, future)
            raise

    def release(self) -> None:
        self.running -= 1
        capacity = setting("CHAT_MAX_TURNS")
        while self.order and (capacity <= 0 or self.running < capacity):
            tenant_id = self.order.popleft()
            line = self.lines[tenant_id]
            future = line.popleft()
            if line:
                self.order.append(tenant_id)
            else:
                del self.lines[tenant_id]
            if not future.done():
                self.running += 1
                future.set_result(None)

    def _forget(self, tenant_id: int, future: asyncio.Future) -> None:
        line = self.lines.get(tenant_id)
        if line is not None and future in line:
            line.remove(future)
            if not line:
                del self.lines[tenant_id]
                self.order.remove(tenant_id)


_gates: LoopScoped[TurnGate] = LoopScoped(TurnGate)


def turn_gate() -> TurnGate:
    """This event loop's gate (one per process in production: Daphne runs one loop)."""
    return _gates.get()


class Outcome(StrEnum):
    """What became of a user message in submit_user_message."""

    STARTED = "started"  # a new turn
    DUPLICATE = "duplicate"  # its client_id was stored before: nothing runs again
    BUSY = "busy"  # another turn of the conversation runs: nothing stored
    OVERLOADED = "overloaded"  # this process has no place for another turn: nothing stored
    # The conversation's last reply handed an API client its tool calls (it goes on only with their results): nothing
    # stored. Read by the message's own insert, so a turn pays no statement for it.
    TOOL_RESULTS_PENDING = "tool_results_pending"


@dataclass
class Submission:
    """What became of a user_message (Outcome), with its stored message, reply and frames."""

    outcome: Outcome
    message: Message | None = None
    reply: Message | None = None
    frames: list[frames.Logged] = field(default_factory=list)
    # A started turn's task (its result is the TurnResult, None if the turn broke); callers may await it.
    task: asyncio.Task | None = None


def _stored_with_client_id(conversation: Conversation, client_id: str) -> tuple[Message | None, Message | None]:
    """The stored user message with this client_id, and its reply (`reply_to`)."""
    # Ordered by id, not by Message's default ordering (which joins the conversation for its own ordering).
    message = Message.objects.filter(conversation=conversation, client_id=client_id).order_by("id").first()
    if message is None:
        return None, None
    return message, reply_to(conversation, message)


@dataclass(frozen=True)
class Files:
    """A message's files as admission checked them (memory.attachments.MessageFiles) and the account that sent them
    (a member's, or a website visitor's own)."""

    files: MessageFiles
    user_id: int


# What store_new gives: (message, reply, created, the files' attachment_info).
Stored = tuple[Message, Message | None, bool, list[dict] | None]


def store_new(
    conversation: Conversation,
    client_id: str,
    content: str,
    then: Sequence[ChatMessage] = (),
    files: Files | None = None,
    unless_awaiting_tools: bool = False,
) -> Stored:
    """Store the user message (and `then` after it: an API client's own tool round) with its files in one
    transaction; when its client_id was stored before (a resend), that message and its reply instead (and none of
    the files). The unique constraint finds a resend, so a new message costs no lookup first.
    (message, reply, created, the files' attachment_info)"""
    infos = None
    try:
        if files is not None and files.files:
            message, stored = user_message_add(
                conversation=conversation,
                content=content,
                client_id=client_id,
                files=files.files,
                user_id=files.user_id,
                unless_awaiting_tools=unless_awaiting_tools,
            )
            infos = [attachment_info(row) for row in stored]
        else:
            message = message_add(
                conversation=conversation, role=Role.USER, content=content, client_id=client_id,
                return_existing=False, unless_awaiting_tools=unless_awaiting_tools,
            )  # fmt: skip
    except IntegrityError:
        message, reply = _stored_with_client_id(conversation, client_id)
        if message is None:
            raise
        return message, reply, False, None
    if then:
        messages_import(conversation=conversation, messages=then)
    return message, None, True, infos


async def submit_user_message(
    *,
    conversation: Conversation,
    client_id: str,
    content: str,
    also: Sink | None = None,
    then: Sequence[ChatMessage] = (),
    options: CallOptions | None = None,
    files: Files | None = None,
    unless_awaiting_tools: bool = False,
    fresh: bool = False,
    cleared: bool = False,
    stored: Stored | None = None,
) -> Submission:
    """Store the message and start its turn, unless its client_id was stored already (nothing runs again) or
    another turn of the conversation is running (busy: nothing is stored). The turn's frames go to the frame log
    (every open page sees them) and, when given, to `also` (the API's answer). An API client's request may add
    `then` (its tool calls and their results, stored after the message) and `options` (llm.options); `files` are
    the message's files (stored with it, in the same transaction). `unless_awaiting_tools`: refused
    (TOOL_RESULTS_PENDING, nothing stored) when the conversation waits for an API client's tool results. `fresh`:
    the caller made the conversation for this message a moment ago, so no turn of it can be running or have died:
    the frame log is not asked (the claim below still is). `cleared`: the caller found the conversation free and
    the gate with room (`clear_to_store`) just before it stored the message itself: neither is asked again, so a
    stored message is not refused (the claim below still may find a turn that began meanwhile). `stored`: the
    message as the caller already stored it (store_new, in the caller's own hop); a refusal then leaves it to the
    caller, who made the conversation, to take both back."""
    log = get_frame_log()
    refusal = None
    if not (fresh or cleared) and not await _claim_clears(log, conversation.pk):
        refusal = Outcome.BUSY
    elif not cleared and not turn_gate().has_room():
        refusal = Outcome.OVERLOADED
    if refusal is not None:
        if stored is not None:
            return Submission(refusal)
        # A resend of a stored message is answered as a duplicate (its turn may be the one running), never refused.
        message, reply = await database_sync_to_async(_stored_with_client_id)(conversation, client_id)
        if message is not None:
            return await _duplicate(log, conversation, message, reply)
        return Submission(refusal)
    if stored is None:
        try:
            stored = await database_sync_to_async(store_new)(
                conversation, client_id, content, then, files, unless_awaiting_tools
            )
        except ToolResultsPending:
            return Submission(Outcome.TOOL_RESULTS_PENDING)
    message, reply, created, infos = stored
    if not created:
        return await _duplicate(log, conversation, message, reply)
    running = await log.claim_turn(conversation.pk, message.pk)
    if running is not None:
        # Another process stored the same client_id at the same moment (it runs the turn), or began another turn.
        if running == message.pk:
            return await _duplicate(log, conversation, message, None)
        return Submission(Outcome.BUSY, message=message)
    channel = ChannelSink(conversation.pk, log)
    sink = channel if also is None else TeeSink(channel, also)
    # The turn starts while its echo is written: the echo is queued for the log below before the task's first step
    # runs (a conversation's frames reach the log in the order they were queued), and the turn's setup need not wait
    # for the echo's round trip.
    task = asyncio.get_running_loop().create_task(_run(log, conversation, message, sink, options))
    _tasks.add(task)  # the loop keeps only weak references to tasks
    task.add_done_callback(_tasks.discard)
    echo = await channel.emit(
        frames.UserMessage(message_id=message.pk, client_id=client_id, content=message.content, attachments=infos)
    )
    return Submission(Outcome.STARTED, message=message, frames=[echo], task=task)


async def clear_to_store(conversation_id: int) -> bool:
    """Whether a message for this conversation may be stored before it is submitted (`cleared`): the turn gate has
    room and the frame log has no turn of the conversation, running or dead (a read; nothing is claimed). False
    sends the message the usual way, where a busy conversation is waited for and a dead turn ended."""
    return turn_gate().has_room() and await get_frame_log().is_free(conversation_id)


async def _claim_clears(log: FrameLog, conversation_id: int) -> bool:
    """True when no turn of the conversation runs, waiting up to CLAIM_GRACE_SECONDS (WIND_DOWN_SECONDS for a turn
    whose last frame is logged): a turn sends `done` just before it releases its claim, so a message sent the moment
    its reply ends must not be refused as busy. A turn whose process died is ended first, so its interrupted reply
    comes before the new message."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CLAIM_GRACE_SECONDS
    extended = False
    while True:
        # One round trip: whether a turn runs and, when none does, the dead turn to end (engine.interrupted).
        running, adopted = await log.running_or_adopted(conversation_id)
        if running is None:
            break
        if loop.time() >= deadline:
            if extended or not await _winding_down(log, conversation_id):
                return False
            extended = True
            deadline = loop.time() + WIND_DOWN_SECONDS
        await asyncio.sleep(0.05)
    if adopted is not None:
        await end_adopted_turns(log, [(conversation_id, adopted)])
    return True


async def _winding_down(log: FrameLog, conversation_id: int) -> bool:
    """Whether the conversation's latest logged frame ends a turn (done, or an error): its turn has said all it
    will and only releases its claim still. Turns of one conversation never overlap, so that frame is the running
    turn's."""
    last = await log.last_seq(conversation_id)
    tail = await log.after(conversation_id, last - 1) if last else []
    return bool(tail) and isinstance(tail[-1].frame, frames.Done | frames.Error)


async def _duplicate(log: FrameLog, conversation: Conversation, message: Message, reply: Message | None) -> Submission:
    logged = turn_frames(await log.after(conversation.pk, 0), message.pk)
    return Submission(Outcome.DUPLICATE, message=message, reply=reply, frames=logged)


async def _watch_stop(log: FrameLog, conversation_id: int, turn_id: int, stop: asyncio.Event) -> None:
    """Set `stop` when a stop is requested for this turn (a bus message from any process: no polling); meanwhile
    keep the turn's claim alive."""
    cancel = hub_for(log).on_stop(conversation_id, turn_id, stop.set)
    try:
        await log.subscribed()
        while True:
            try:
                if await log.stop_requested(conversation_id, turn_id):  # asked before we listened, or while away
                    stop.set()
            except Exception:  # a store hiccup must not end the turn; the next round tries again
                logger.warning("stop watcher: frame log unavailable conversation=%s", conversation_id, exc_info=True)
            if stop.is_set():
                return
            await asyncio.sleep(turn_lease_seconds() / RENEWALS_PER_LEASE)
            try:
                await log.renew_turn(conversation_id, turn_id)
            except Exception:
                logger.warning("stop watcher: claim not renewed conversation=%s", conversation_id, exc_info=True)
    finally:
        cancel()


async def _run(
    log: FrameLog, conversation: Conversation, message: Message, sink: Sink, options: CallOptions | None = None
) -> TurnResult | None:
    stop = asyncio.Event()
    gate = turn_gate()
    watcher = asyncio.get_running_loop().create_task(_watch_stop(log, conversation.pk, message.pk, stop))
    try:
        await gate.acquire(conversation.tenant_id)
        try:
            return await run_turn(
                conversation=conversation, user_message=message, sink=sink, stop=stop, options=options
            )
        finally:
            gate.release()
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("chat turn failed conversation=%s message=%s", conversation.pk, message.pk)
        return None
    finally:
        watcher.cancel()
        try:
            await asyncio.shield(log.release_turn(conversation.pk, message.pk))
        except Exception:  # the frame log is unavailable: the lease runs out, and another process ends the turn
            logger.warning("turn claim not released conversation=%s", conversation.pk, exc_info=True)


async def request_stop(*, conversation_id: int) -> bool:
    """Ask the conversation's running turn to stop, whichever process runs it. False when none is running."""
    log = get_frame_log()
    turn_id = await log.running_turn(conversation_id)
    if turn_id is None:
        return False
    await log.request_stop(conversation_id, turn_id)
    return True


async def run_server_turn(*, conversation: Conversation, content: str) -> bool:
    """A turn the server starts on the user's behalf (the plan ask timeout's "no reply"): stored, claimed and
    streamed like a typed message, so an open chat page shows it live and it never runs beside the user's own
    turn. False when another turn of the conversation is running (the user answered first): nothing is stored."""
    log = get_frame_log()
    if not await _claim_clears(log, conversation.pk):
        return False
    message = await database_sync_to_async(message_add)(conversation=conversation, role=Role.USER, content=content)
    running = await log.claim_turn(conversation.pk, message.pk)
    if running is not None:
        await database_sync_to_async(Message.objects.filter(pk=message.pk).delete)()
        return False
    sink = ChannelSink(conversation.pk, log)
    await sink.emit(frames.UserMessage(message_id=message.pk, content=message.content))
    await _run(log, conversation, message, sink)
    return True

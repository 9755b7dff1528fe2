"""The conversation socket: the chat page's `ws/chat/<conversation_id>/` and, entered another way, the widget's
`ws/embed/<token>/` (widget.consumers). User messages are taken through the engine's one admission
(engine.admission), frames of the conversation are forwarded in seq order, `catch_up` replays what a socket missed,
`stop` stops the running turn. Protocol: docs/stream-protocol.md.

How a socket is entered (who calls, which conversation it watches) is an `Entry`: the session's (here) or the embed
token's (widget.consumers); the socket itself is the same for both.

The socket takes its frames from this process's bus hub (engine.bus), not from the channel layer: no channel, no group
and no blocking receive per socket. Frames pass through an inbox drained by one task at a time under the socket's
lock, so live frames, a catch-up and a gap repair never interleave.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.utils.translation import get_supported_language_variant, override
from django.utils.translation.trans_real import parse_accept_lang_header

from agents import frames
from agents.limits import MessageLimit
from core.db import database_sync_to_async
from engine import admission, turns
from engine.admission import Caller, Refusal, RefusalCode, Target
from engine.bus import hub_for
from engine.sinks import page_frame
from engine.streams import get_frame_log
from engine.turns import Outcome
from llm import errors
from memory.models import Conversation, ConversationSource
from memory.selectors import access_conversation
from tenants.middleware import SESSION_KEY
from tenants.models import Tenant
from tenants.scope import tenant_scope
from tenants.selectors import resolve_membership

# A socket that has not said where to resume from (catch_up) within this delay gets live frames from its connect.
SYNC_DELAY_SECONDS = 1.0
# An entry that takes its credentials in the socket's first frame (the widget's) waits this long for it.
CREDENTIALS_SECONDS = 10.0
# Close code of a socket whose user left the tenant or changed role: the page reconnects at once, and the connect
# checks access again (a removed member then gets 4403).
ACCESS_CHANGED_CLOSE = 4012
NOT_AUTHENTICATED_CLOSE = 4401
REFUSED_CLOSE = 4403
# Inbox markers: catch up from the log (the bus reconnected); start live frames if the page has not said where it
# resumes from (SYNC_DELAY_SECONDS after connect).
_RESYNC = -1
_SYNC = -2

logger = logging.getLogger("chat.consumers")


def frame_attachment_ids(value: Any) -> list[int] | None:
    """A user_message frame's "attachments": the ids of files uploaded before ([] when absent); None when it is not
    a list of ids. Whether each is the caller's to send is the engine's admission's decision."""
    if value is None:
        return []
    valid = isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) and 0 < item < 2**63 for item in value
    )
    return list(value) if valid else None


def socket_language(scope: dict[str, Any]) -> str:
    """The connection's language: the language cookie, else Accept-Language, else the site default."""
    headers = dict(scope.get("headers") or [])
    candidates = []
    cookies = scope.get("cookies") or {}
    if cookies.get(settings.LANGUAGE_COOKIE_NAME):
        candidates.append(cookies[settings.LANGUAGE_COOKIE_NAME])
    accept = headers.get(b"accept-language", b"").decode("latin-1")
    candidates += [code for code, _quality in parse_accept_lang_header(accept) if code != "*"]
    for code in candidates:
        with contextlib.suppress(LookupError):
            return get_supported_language_variant(code)
    return settings.LANGUAGE_CODE


class Entry:
    """How a conversation socket was entered: who is calling (engine.admission.Caller), the conversation the socket
    watches (None until a widget visitor's first message makes it) and where a message goes. The methods without
    `async` run on the database thread."""

    # True: the socket is accepted first and its credentials come in its first frame (`credentials()`).
    takes_credentials = False

    def __init__(self, scope: dict[str, Any]) -> None:
        self.scope = scope
        self.tenant: Tenant | None = None
        self.conversation: Conversation | None = None
        self.language = settings.LANGUAGE_CODE
        # The conversation's message limit, as the first admitted message worked it out (engine.admission.Target).
        self.limit: MessageLimit | None = None

    def open(self) -> int | None:
        """Read what the connect needs (one database hop); a close code to refuse the socket, else None."""
        raise NotImplementedError

    def credentials(self, content: dict[str, Any]) -> bool:
        """Check the first frame's credentials (entries that take them); False: the socket is refused."""
        return False

    def caller(self) -> Caller:
        raise NotImplementedError

    def target(self) -> Target:
        """Where a message of this socket goes: its conversation."""
        return Target(conversation=self.conversation, limit=self.limit)

    def gone(self) -> str:
        """Words when the entry closed meanwhile (checked before each message); "" while it is open."""
        return ""

    def watch_access(self, hub: Any, on_change: Callable[[], None]) -> Callable[[], None]:
        """Call `on_change` when the caller's access changes; returns the function that stops watching."""
        return lambda: None


class SessionEntry(Entry):
    """The chat page's socket `ws/chat/<conversation_id>/`: a logged-in member in the session's active tenant, on a
    conversation they may read (memory.selectors.access_conversation); only its participant posts (admission)."""

    def open(self) -> int | None:
        user = self.scope["user"]
        if not user.is_authenticated:
            return NOT_AUTHENTICATED_CLOSE
        session = self.scope.get("session")
        tenant_id = session.get(SESSION_KEY) if session is not None else None
        self.tenant, self.membership = resolve_membership(user=user, tenant_id=tenant_id)
        if self.tenant is None:
            return REFUSED_CLOSE
        with tenant_scope(self.tenant):
            try:
                self.conversation = access_conversation(
                    conversation_id=int(self.scope["url_route"]["kwargs"]["conversation_id"]),
                    user=user,
                    membership=self.membership,
                )
            except Conversation.DoesNotExist:
                return REFUSED_CLOSE
        self.language = socket_language(self.scope)
        return None

    def caller(self) -> Caller:
        return Caller(
            tenant=self.tenant, source=ConversationSource.CHAT, user=self.scope["user"], membership=self.membership
        )

    def watch_access(self, hub: Any, on_change: Callable[[], None]) -> Callable[[], None]:
        """Removed from the tenant, or given another role: the socket closes; a reconnect checks access again."""
        return hub.on_access_change(self.scope["user"].pk, self.tenant.pk, on_change)


class ConversationSocket(AsyncJsonWebsocketConsumer):
    """A socket on one conversation, entered through `entry` (SessionEntry; the widget's EmbedEntry): frames
    forwarded in seq order, catch-up, stop, and messages taken through the engine's one admission."""

    # Frames come from the bus hub: this consumer needs no channel-layer channel (an unknown alias gives None).
    channel_layer_alias = "chat-sockets-use-the-bus"
    entry_class: type[Entry] = SessionEntry
    entry: Entry | None = None
    conversation: Conversation | None = None
    hub = None
    pump: asyncio.Task | None = None  # set at accept: a refused socket's disconnect finds None
    opened = False

    async def dispatch(self, message: dict) -> None:
        # Channels' dispatch first closes stale database connections on a thread of their own: a thread hop for
        # every frame a socket receives. Every database call here goes through core.db.database_sync_to_async,
        # which gives back or closes its connection around each hop itself, so the handler is called directly.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        tenant = self.entry.tenant if self.entry is not None else None
        with tenant_scope(tenant) if tenant is not None else contextlib.nullcontext():
            await handler(message)

    async def connect(self) -> None:
        self.entry = self.entry_class(self.scope)
        refused = await database_sync_to_async(self.entry.open)()
        if refused is not None:
            await self.close(code=refused)
            return
        if self.entry.takes_credentials:
            await self.accept()
            self._credentials_timer = asyncio.get_running_loop().call_later(
                CREDENTIALS_SECONDS, lambda: asyncio.ensure_future(self.close(code=NOT_AUTHENTICATED_CLOSE))
            )
            return
        await self.accept()
        await self.open_stream()

    async def open_stream(self) -> None:
        """Say hello, then forward the conversation's frames (none yet when it has no conversation)."""
        self.opened = True
        self.language = self.entry.language
        self.log = get_frame_log()
        # Frames arriving before this socket says where it resumes from are held (they are in the log too).
        self.synced = False
        self.sent_seq = 0
        self.connect_seq = 0
        self.held: list[tuple[int, str]] = []
        self.inbox: deque[tuple[int, str]] = deque()
        self.lock = asyncio.Lock()
        self.hub = hub_for(self.log)
        self._unwatch = self.entry.watch_access(self.hub, self._access_changed)
        running = None
        if self.entry.conversation is not None:
            self.conversation = self.entry.conversation
            await self.hub.listen(self.conversation.pk, self)
            self.connect_seq, running = await self.log.state(self.conversation.pk)
        conversation_id = self.conversation.pk if self.conversation is not None else None
        hello = frames.Hello(conversation_id=conversation_id, last_seq=self.connect_seq, running=running is not None)
        await self.send_json(hello.as_dict())
        self._sync_timer = asyncio.get_running_loop().call_later(SYNC_DELAY_SECONDS, self._push, _SYNC, "")

    async def _attach(self, conversation: Conversation) -> None:
        """The conversation a first message made: listen to it and send its frames from the first."""
        self.conversation = self.entry.conversation = conversation
        await self.hub.listen(conversation.pk, self)
        await self._replay(0)

    async def disconnect(self, code: int) -> None:
        for timer in (getattr(self, "_sync_timer", None), getattr(self, "_credentials_timer", None)):
            if timer is not None:
                timer.cancel()
        if self.hub is not None:
            if self.conversation is not None:
                self.hub.unlisten(self.conversation.pk, self)
            self._unwatch()
        if self.pump is not None:
            self.pump.cancel()
        # The turn is not ours to end: it runs on and is stored; other sockets (or a reconnect) get its frames.

    def _access_changed(self) -> None:
        asyncio.get_running_loop().create_task(self.close(code=ACCESS_CHANGED_CLOSE))

    # The hub's side (engine.bus.Listener): called on the event loop, never blocks.
    def deliver(self, seq: int, body: str) -> None:
        self._push(seq, body)

    def resync(self) -> None:
        self._push(_RESYNC, "")

    def _push(self, seq: int, body: str) -> None:
        self.inbox.append((seq, body))
        if self.pump is None or self.pump.done():
            self.pump = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        async with self.lock:
            while self.inbox:
                seq, body = self.inbox.popleft()
                if seq == _SYNC:
                    if not self.synced:
                        await self._replay_locked(self.connect_seq)
                elif seq == _RESYNC:
                    await self._replay_locked(self.sent_seq if self.synced else self.connect_seq)
                elif not self.synced:
                    self.held.append((seq, body))
                else:
                    await self._forward(seq, body)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not self.opened:  # an entry that takes credentials: its first frame
            await self._credentials(content)
            return
        if not isinstance(content, dict):
            await self._send_refusal(errors.BAD_REQUEST)
            return
        kind = frames.client_kind(content)
        if kind == frames.ClientKind.CATCH_UP:
            after_seq = content.get("after_seq")
            if not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0:
                await self._send_refusal(errors.BAD_REQUEST)
                return
            await self._replay(after_seq)
            return
        if not self.synced:
            await self._replay(self.connect_seq)
        if kind == frames.ClientKind.USER_MESSAGE:
            await self._user_message(content)
        elif kind == frames.ClientKind.STOP and self.conversation is not None:
            await turns.request_stop(conversation_id=self.conversation.pk)
        elif kind != frames.ClientKind.STOP:
            await self._send_refusal(errors.BAD_REQUEST)

    async def _credentials(self, content: Any) -> None:
        if not isinstance(content, dict) or frames.client_kind(content) != frames.ClientKind.VISITOR:
            await self.close(code=NOT_AUTHENTICATED_CLOSE)
            return
        if not await database_sync_to_async(self.entry.credentials)(content):
            await self.close(code=REFUSED_CLOSE)
            return
        self._credentials_timer.cancel()
        await self.open_stream()

    async def _user_message(self, content: dict[str, Any]) -> None:
        client_id = content.get("client_id")
        gone = await database_sync_to_async(self.entry.gone)() if self.entry.takes_credentials else ""
        if gone:
            await self._send_refusal(RefusalCode.CONVERSATION_NOT_FOUND, client_id, text=gone)
            return
        attachments = frame_attachment_ids(content.get("attachments"))
        if attachments is None:
            await self._send_refusal(RefusalCode.ATTACHMENT_NOT_FOUND, client_id)
            return
        with override(self.language):
            decision = await admission.admit(
                caller=self.entry.caller(), target=self.entry.target(), content=content.get("content"),
                client_id=client_id, attachments=attachments,
            )  # fmt: skip
            if isinstance(decision, Refusal):
                await self._send_refusal(decision.code, client_id, decision.message, decision.retry_after)
                return
        self.entry.limit = decision.limit
        if self.conversation is None:
            await self._attach(decision.conversation)
            return
        if decision.outcome == Outcome.DUPLICATE:
            for logged in admission.answer_frames(decision, client_id):
                await self._send_logged(logged)

    async def _send_logged(self, logged: frames.Logged) -> None:
        if logged.seq is None:
            await self._send_own(logged.frame)
        else:
            await self._send_frame(logged, replay=True)

    async def _send_own(self, frame: frames.Frame) -> None:
        """A frame for this socket only, not of the conversation: `seq` is null and the log does not keep it."""
        await self.send_json(frames.Logged(None, page_frame(frame)).as_dict())

    async def _send_refusal(
        self, code: str, client_id: Any = None, text: str = "", retry_after: int | None = None
    ) -> None:
        """An error for this socket only (not a frame of the conversation: seq is null)."""
        if not text:
            text = errors.message_for(code, self.language)
        client_id = client_id if isinstance(client_id, str) else None
        await self._send_own(frames.Error(code=code, message=text, client_id=client_id, retry_after=retry_after))

    async def _replay(self, after_seq: int) -> None:
        async with self.lock:
            await self._replay_locked(after_seq)

    async def _replay_locked(self, after_seq: int) -> None:
        """Send every kept frame with seq > after_seq, in order; then live frames continue after the last one."""
        if self.conversation is None:  # a visitor before their first message: nothing to send yet
            self.synced = True
            return
        last = await self.log.last_seq(self.conversation.pk)
        after_seq = min(after_seq, last)  # a counter that restarted (store flushed): resume from its present
        logged = await self.log.after(self.conversation.pk, after_seq)
        if logged and logged[0].seq > after_seq + 1:
            await self._send_own(frames.Gap(after_seq=after_seq, first_seq=logged[0].seq))
        self.sent_seq = after_seq
        for entry in logged:
            await self._send_frame(entry, replay=True)
        held, self.held, self.synced = self.held, [], True
        for seq, body in held:
            await self._forward(seq, body)

    async def _forward(self, seq: int, body: str) -> None:
        """A live frame: sent unless already sent; a seq jump means frames went missing on the way: read them from
        the log first (the page never sees a hole it did not ask about)."""
        if seq <= self.sent_seq:
            return
        if seq > self.sent_seq + 1:
            try:
                for logged in await self.log.after(self.conversation.pk, self.sent_seq):
                    if logged.seq < seq:
                        await self._send_frame(logged)
            except Exception:
                logger.warning("gap repair failed conversation=%s", self.conversation.pk, exc_info=True)
        if frames.is_error_body(body):
            await self._send_frame(frames.Logged(seq, frames.parse(body)))
            return
        await self.send(text_data=f'{{"seq":{seq},{body[1:]}')
        self.sent_seq = seq

    async def _send_frame(self, logged: frames.Logged, replay: bool = False) -> None:
        if not replay and logged.seq <= self.sent_seq:
            return  # already sent by a replay
        frame = logged.frame
        if isinstance(frame, frames.Error) and frame.code:  # in the socket's language
            frame = dataclasses.replace(frame, message=errors.message_for(frame.code, self.language))
        await self.send_json({"seq": logged.seq, **frame.as_dict()})
        self.sent_seq = max(self.sent_seq, logged.seq)

"""The chat websocket `ws/chat/<conversation_id>/`: user messages start turns, frames of the conversation are forwarded
in seq order, `catch_up` replays what a socket missed, `stop` stops the running turn. Protocol:
docs/stream-protocol.md.

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
from typing import Any

from django.conf import settings
from django.utils.translation import get_supported_language_variant, gettext, override
from django.utils.translation.trans_real import parse_accept_lang_header

from agents import frames
from agents.limits import MAX_MESSAGE_CHARS, MessageLimit
from chat.selectors import conversation_message_limit
from core.conf import setting
from core.db import database_sync_to_async
from engine import turns
from engine.bus import hub_for
from engine.sinks import page_frame
from engine.streams import get_frame_log
from llm import errors
from memory.models import Conversation
from memory.selectors import access_conversation
from tenants.consumers import TenantScopedJsonConsumer

# A socket that has not said where to resume from (catch_up) within this delay gets live frames from its connect.
SYNC_DELAY_SECONDS = 1.0
MAX_CONTENT_CHARS = MAX_MESSAGE_CHARS  # the platform's limit; an agent's own may be less (agents.limits)
MAX_CLIENT_ID_CHARS = 100
# Refusal codes of a socket's own message (besides busy and overloaded).
EMPTY_MESSAGE = "empty_message"
MESSAGE_TOO_LONG = "message_too_long"
# Close code of a socket whose user left the tenant or changed role: the page reconnects at once, and the connect
# checks access again (a removed member then gets 4403).
ACCESS_CHANGED_CLOSE = 4012
# Inbox markers: catch up from the log (the bus reconnected); start live frames if the page has not said where it
# resumes from (SYNC_DELAY_SECONDS after connect).
_RESYNC = -1
_SYNC = -2

logger = logging.getLogger("chat.consumers")


def _conversation_for(*, user: Any, membership: Any, conversation_id: int) -> Conversation | None:
    """The conversation if `user` may open it (memory.selectors.access_conversation: the chat page's rule too)."""
    try:
        return access_conversation(conversation_id=conversation_id, user=user, membership=membership)
    except Conversation.DoesNotExist:
        return None


def _language(scope: dict[str, Any]) -> str:
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


class ChatConsumer(TenantScopedJsonConsumer):
    # Frames come from the bus hub: this consumer needs no channel-layer channel (an unknown alias gives None).
    channel_layer_alias = "chat-sockets-use-the-bus"
    conversation: Conversation | None = None
    hub = None
    pump: asyncio.Task | None = None  # set at accept: a refused socket's disconnect finds None
    # The conversation's message limit (agents.limits), read at the first message (a connect stays one hop), and at
    # every message of a test conversation, whose draft may be edited meanwhile.
    limit: MessageLimit | None = None

    def connect_reads(self) -> None:
        if self.scope["user"].is_authenticated:
            self.conversation = _conversation_for(
                user=self.scope["user"],
                membership=self.membership,
                conversation_id=int(self.scope["url_route"]["kwargs"]["conversation_id"]),
            )

    async def connect(self) -> None:
        if not self.scope["user"].is_authenticated:
            await self.close(code=4401)
            return
        if self.conversation is None:  # read with the membership (connect_reads): one database hop per connect
            await self.close(code=4403)
            return
        await self.open_stream(self.conversation, _language(self.scope))

    async def open_stream(self, conversation: Conversation, language: str) -> None:
        """Accept the socket on `conversation`: say hello, then forward its frames (the widget's socket too)."""
        self.conversation = conversation
        self.language = language
        self.log = get_frame_log()
        # Frames arriving before this socket says where it resumes from are held (they are in the log too).
        self.synced = False
        self.sent_seq = 0
        self.held: list[tuple[int, str]] = []
        self.inbox: deque[tuple[int, str]] = deque()
        self.lock = asyncio.Lock()
        self.hub = hub_for(self.log)
        self._unwatch = self.watch_access()
        await self.hub.listen(conversation.pk, self)
        self.connect_seq, running = await self.log.state(conversation.pk)
        await self.accept()
        hello = frames.Hello(conversation_id=conversation.pk, last_seq=self.connect_seq, running=running is not None)
        await self.send_json(hello.as_dict())
        self._sync_timer = asyncio.get_running_loop().call_later(SYNC_DELAY_SECONDS, self._push, _SYNC, "")

    async def disconnect(self, code: int) -> None:
        timer = getattr(self, "_sync_timer", None)
        if timer is not None:
            timer.cancel()
        if self.hub is not None:
            self.hub.unlisten(self.conversation.pk, self)
            self._unwatch()
        if self.pump is not None:
            self.pump.cancel()
        # The turn is not ours to end: it runs on and is stored; other sockets (or a reconnect) get its frames.

    def watch_access(self) -> Any:
        """Removed from the tenant, or given another role: this socket closes; a reconnect checks access again.
        Returns the function that stops watching."""
        return self.hub.on_access_change(self.scope["user"].pk, self.tenant.pk, self._access_changed)

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
        if not isinstance(content, dict):
            await self._reject(errors.BAD_REQUEST)
            return
        kind = frames.client_kind(content)
        if kind == frames.ClientKind.CATCH_UP:
            after_seq = content.get("after_seq")
            if not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0:
                await self._reject(errors.BAD_REQUEST)
                return
            await self._replay(after_seq)
            return
        if not self.synced:
            await self._replay(self.connect_seq)
        if kind == frames.ClientKind.USER_MESSAGE:
            await self._user_message(content)
        elif kind == frames.ClientKind.STOP:
            await turns.request_stop(conversation_id=self.conversation.pk)
        else:
            await self._reject(errors.BAD_REQUEST)

    async def _user_message(self, content: dict[str, Any]) -> None:
        client_id, text = content.get("client_id"), content.get("content")
        if not isinstance(client_id, str) or not client_id.strip() or len(client_id) > MAX_CLIENT_ID_CHARS:
            await self._reject(errors.BAD_REQUEST, client_id=client_id if isinstance(client_id, str) else None)
            return
        if not isinstance(text, str) or not text.strip():
            await self._reject(EMPTY_MESSAGE, client_id=client_id)
            return
        if len(text) > MAX_CONTENT_CHARS:
            await self._reject(MESSAGE_TOO_LONG, client_id=client_id)
            return
        if self.conversation.parent_id is not None:  # a plan step's conversation is read-only
            await self._reject(errors.BAD_REQUEST, client_id=client_id)
            return
        if self.limit is None or self.conversation.is_test:  # a test conversation's draft may change between messages
            self.limit = await database_sync_to_async(conversation_message_limit)(conversation=self.conversation)
        with override(self.language):
            too_long = self.limit.refusal(text)
        if too_long:
            await self._reject(MESSAGE_TOO_LONG, client_id=client_id, text=too_long)
            return
        submission = await turns.submit_user_message(conversation=self.conversation, client_id=client_id, content=text)
        if submission.outcome in ("busy", "overloaded"):
            await self._reject(submission.outcome, client_id=client_id)
        elif submission.outcome == "duplicate":
            await self._resend(submission, client_id)

    async def _resend(self, submission: turns.Submission, client_id: str) -> None:
        """A resent client_id: replay the logged frames of its turn, or say what the database knows."""
        if submission.frames:
            for logged in submission.frames:
                await self._send_frame(logged, replay=True)
            return
        message, reply = submission.message, submission.reply
        echo = frames.UserMessage(message_id=message.pk, client_id=client_id, content=message.content, duplicate=True)
        await self._send_own(echo)
        if reply is not None:
            usage = reply.usage or {}
            done = frames.Done(
                message_id=reply.pk,
                status=reply.status,
                usage=frames.usage_dict(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)),
                content=reply.content,
                duplicate=True,
            )
            await self._send_own(done)

    async def _send_own(self, frame: frames.Frame) -> None:
        """A frame for this socket only, not of the conversation: `seq` is null and the log does not keep it."""
        await self.send_json(frames.Logged(None, page_frame(frame)).as_dict())

    async def _reject(self, code: str, client_id: str | None = None, text: str = "") -> None:
        """An error for this socket only (not a frame of the conversation: seq is null); `text` says why, else the
        code's own words."""
        retry_after = setting("CHAT_BUSY_RETRY_SECONDS") if code == "overloaded" else None
        if not text:
            with override(self.language):
                text = self._reason(code, retry_after)
        await self._send_own(frames.Error(code=code, message=text, client_id=client_id, retry_after=retry_after))

    def _reason(self, code: str, retry_after: int | None) -> str:
        """The words of a refusal code, in the active language."""
        if code == "busy":
            return gettext("The agent is still answering. Wait for the reply or stop it, then send again.")
        if code == "overloaded":
            return gettext("The platform is busy and did not take your message. It is sent again in %(seconds)s s.") % {
                "seconds": retry_after
            }
        if code == EMPTY_MESSAGE:
            return gettext("The message is empty. Write something first.")
        if code == MESSAGE_TOO_LONG:
            return MessageLimit(chars=MAX_CONTENT_CHARS).explanation()
        return errors.message_for(code, self.language)

    async def _replay(self, after_seq: int) -> None:
        async with self.lock:
            await self._replay_locked(after_seq)

    async def _replay_locked(self, after_seq: int) -> None:
        """Send every kept frame with seq > after_seq, in order; then live frames continue after the last one."""
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

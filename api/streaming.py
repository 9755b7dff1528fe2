"""POST /api/v1/conversations/{id}/messages/stream/: send a message and read the turn's frames as server-sent events
(`event: <frame type>`, `data: <the frame of docs/stream-protocol.md>`), the same frames an open chat page gets.

A plain async view (DRF has none): with a key (`chat` scope) or the browser session (with its CSRF token)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt

from agents import frames
from agents.sinks import QueueSink
from api.keys import KeyRefused, bearer_secret, caller_conversation
from api.models import KeyScope
from api.parsers import unstorable_at, unstorable_message
from api.throttling import StreamSlot, admit, holding, stream_slot_take
from core.bounded import loads_json
from core.db import database_sync_to_async
from engine import turns
from memory.models import Conversation
from tenants.models import Tenant
from tenants.scope import tenant_scope

MAX_CONTENT_CHARS = 20_000
MAX_CLIENT_ID_CHARS = 100


class Refused(Exception):
    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after

    def response(self) -> JsonResponse:
        response = JsonResponse({"error": {"code": self.code, "message": self.message}}, status=self.status,
                                json_dumps_params={"ensure_ascii": False})  # fmt: skip
        if self.retry_after is not None:
            response["Retry-After"] = str(max(1, round(self.retry_after)))
        return response


@dataclass
class Send:
    tenant: Tenant
    conversation: Conversation
    content: str
    client_id: str
    slot: StreamSlot | None = None  # a key's stream's place among the tenant's (api.throttling)


def _body(raw: bytes) -> tuple[str, str]:
    try:
        data = loads_json(raw or b"")
    except (ValueError, UnicodeDecodeError):
        raise Refused(400, "validation_error", _("The request body is not valid JSON.")) from None
    content = data.get("content") if isinstance(data, dict) else None
    client_id = data.get("client_id") if isinstance(data, dict) else None
    if not isinstance(content, str) or not content.strip():
        raise Refused(400, "validation_error", _("Write a message first."))
    if (where := unstorable_at(data)) is not None:
        raise Refused(400, "validation_error", unstorable_message(where))
    if len(content) > MAX_CONTENT_CHARS:
        too_long = _("The message is longer than %(max)s characters.") % {"max": MAX_CONTENT_CHARS}
        raise Refused(400, "validation_error", too_long)
    if client_id is not None and (not isinstance(client_id, str) or not 0 < len(client_id) <= MAX_CLIENT_ID_CHARS):
        raise Refused(400, "validation_error", _("The idempotency key must be a string of at most %(n)s characters.")
                      % {"n": MAX_CLIENT_ID_CHARS})  # fmt: skip
    return content, client_id or f"api-{uuid.uuid4().hex}"


def _prepare(request: HttpRequest, conversation_id: int) -> Send:
    """Who asks (key or session), and the conversation they may write to (one hop to the database thread)."""
    access = None
    if bearer_secret(request.headers.get("Authorization")) is not None:
        try:
            access = admit(request.headers.get("Authorization"), KeyScope.CHAT)
        except KeyRefused as exc:
            raise Refused(exc.status, exc.code, exc.message, retry_after=exc.retry_after) from None
        tenant, user, membership = access.tenant, access.user, access.membership
    else:
        user, tenant, membership = request.user, getattr(request, "tenant", None), getattr(request, "membership", None)
        if not user.is_authenticated:
            raise Refused(401, "not_authenticated", _("Send an API key: Authorization: Bearer <key>."))
        if tenant is None:
            raise Refused(404, "not_found", _("You are not working in any tenant."))
        if CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, None, (), {}) is not None:
            raise Refused(403, "csrf_failed", _("The page's CSRF token is missing or wrong; reload the page."))
    content, client_id = _body(request.body)
    with tenant_scope(tenant):
        try:
            conversation = caller_conversation(
                conversation_id=conversation_id, user=user, membership=membership, access=access
            )
        except Conversation.DoesNotExist:
            raise Refused(404, "not_found", _("No such conversation.")) from None
    slot = None
    if access is not None:  # the tenant's API streams (the pages' own use of a session is not counted)
        try:
            slot = stream_slot_take(tenant.pk)
        except KeyRefused as exc:
            raise Refused(exc.status, exc.code, exc.message, retry_after=exc.retry_after) from None
    return Send(tenant=tenant, conversation=conversation, content=content, client_id=client_id, slot=slot)


def _event(logged: frames.Logged) -> str:
    """A frame as a server-sent event named by its type (`seq` is null for frames the log did not number)."""
    return f"event: {logged.frame.type}\ndata: {json.dumps(logged.as_dict(), ensure_ascii=False)}\n\n"


@csrf_exempt  # a key request has no CSRF token; a session request is checked in _prepare
async def send_stream(request: HttpRequest, conversation_id: int) -> HttpResponse:
    if request.method != "POST":
        return Refused(405, "method_not_allowed", _("Use POST.")).response()
    try:
        send = await database_sync_to_async(_prepare)(request, conversation_id)
    except Refused as refused:
        return refused.response()
    try:
        response = await _start(send)
    except BaseException:
        if send.slot is not None:
            await send.slot.arelease()
        raise
    if send.slot is not None and not response.streaming:
        await send.slot.arelease()
    return response


async def _start(send: Send) -> HttpResponse:
    sink = QueueSink()
    with tenant_scope(send.tenant):
        submission = await turns.submit_user_message(
            conversation=send.conversation, client_id=send.client_id, content=send.content, also=sink
        )
    if submission.outcome == "busy":
        return Refused(409, "conversation_busy", _("Another reply of this conversation is being written.")).response()
    if submission.outcome == "overloaded":
        return Refused(503, "overloaded", _("The platform is busy. Retry in a few seconds.")).response()
    if submission.task is not None:
        submission.task.add_done_callback(lambda _task: sink.queue.put_nowait(None))
    events = holding(send.slot, _events(submission, sink, send.conversation.pk))
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _events(submission: turns.Submission, sink: QueueSink, conversation_id: int) -> AsyncIterator[str]:
    """The logged frames of a resent turn, or the new turn's frames as they come; a client that leaves stops it."""
    for logged in submission.frames:
        yield _event(logged)
    if submission.task is None:
        if submission.outcome == "duplicate" and submission.reply is not None and len(submission.frames) <= 1:
            reply, usage = submission.reply, submission.reply.usage or {}
            tokens = frames.usage_dict(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
            done = frames.Done(message_id=reply.pk, status=reply.status, content=reply.content, usage=tokens,
                               duplicate=True)  # fmt: skip
            yield _event(frames.Logged(None, done))
        return
    try:
        while (frame := await sink.queue.get()) is not None:
            yield _event(frames.Logged(None, frame))
    except (asyncio.CancelledError, GeneratorExit):
        if not submission.task.done():
            asyncio.get_running_loop().create_task(turns.request_stop(conversation_id=conversation_id))
        raise

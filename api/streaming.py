"""POST /api/v1/conversations/{id}/messages/stream/: send a message and read the turn's frames as server-sent events
(`event: <frame type>`, `data: <the frame of docs/stream-protocol.md>`), the same frames an open chat page gets.

A plain async view (DRF has none): with a key (`chat` scope) or the browser session (with its CSRF token)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt

from agents import frames
from agents.sinks import QueueSink
from api.keys import KeyRefused, bearer_secret
from api.models import KeyScope
from api.parsers import attachment_ids, attachment_ids_words
from api.refusals import error_response, refusal_response
from api.throttling import authorize
from core.bounded import loads_json
from core.db import database_sync_to_async
from engine import admission, turns
from engine.admission import Admitted, Caller, Refusal, Target
from engine.places import holding
from memory.models import ConversationSource


class Refused(Exception):
    """A request refused at the door (who is calling, the body's shape), before the engine's admission."""

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after

    def response(self) -> JsonResponse:
        return error_response(self.status, self.code, self.message, self.retry_after)


@dataclass
class Send:
    caller: Caller
    conversation_id: int
    content: Any
    client_id: Any
    attachments: list[int]


def _body(raw: bytes) -> tuple[Any, Any, list[int]]:
    """The body's content, client_id and attachments (ids), as sent: the engine's admission checks them."""
    try:
        data = loads_json(raw or b"")
    except (ValueError, UnicodeDecodeError):
        raise Refused(400, "validation_error", _("The request body is not valid JSON.")) from None
    if not isinstance(data, dict):
        raise Refused(400, "validation_error", _("Send a JSON object with the message's content."))
    attachments = attachment_ids(data.get("attachments"))
    if attachments is None:
        raise Refused(400, "validation_error", attachment_ids_words())
    return data.get("content"), data.get("client_id") or f"api-{uuid.uuid4().hex}", attachments


def _prepare(request: HttpRequest, conversation_id: int) -> Send:
    """Who asks (a key or the session): one hop to the database thread."""
    if bearer_secret(request.headers.get("Authorization")) is not None:
        try:
            access = authorize(request.headers.get("Authorization"), KeyScope.CHAT)
        except KeyRefused as exc:
            raise Refused(exc.status, exc.code, exc.message, retry_after=exc.retry_after) from None
        caller = access.caller(ConversationSource.API)
    else:
        user, tenant, membership = request.user, getattr(request, "tenant", None), getattr(request, "membership", None)
        if not user.is_authenticated:
            raise Refused(401, "not_authenticated", _("Send an API key: Authorization: Bearer <key>."))
        if tenant is None:
            raise Refused(404, "not_found", _("You are not working in any tenant."))
        if CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, None, (), {}) is not None:
            raise Refused(403, "csrf_failed", _("The page's CSRF token is missing or wrong; reload the page."))
        caller = Caller(tenant=tenant, source=ConversationSource.API, user=user, membership=membership)
    content, client_id, attachments = _body(request.body)
    return Send(
        caller=caller, conversation_id=conversation_id, content=content, client_id=client_id, attachments=attachments
    )


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
    sink = QueueSink()
    decision = await admission.admit(
        caller=send.caller, target=Target(conversation_id=send.conversation_id), content=send.content,
        client_id=send.client_id, stream=True, also=sink, attachments=send.attachments,
    )  # fmt: skip
    if isinstance(decision, Refusal):
        return refusal_response(decision)
    task = decision.submission.task
    if task is not None:
        task.add_done_callback(lambda _task: sink.queue.put_nowait(None))
    events = holding(decision.slot, _events(decision, sink, send.client_id))
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _events(admitted: Admitted, sink: QueueSink, client_id: str) -> AsyncIterator[str]:
    """The frames that answer the message (a resent one's from the log or the database), then the new turn's frames
    as they come; a client that leaves stops it."""
    for logged in admission.answer_frames(admitted, client_id):
        yield _event(logged)
    task = admitted.submission.task
    if task is None:
        return
    try:
        while (frame := await sink.queue.get()) is not None:
            yield _event(frames.Logged(None, frame))
    except (asyncio.CancelledError, GeneratorExit):
        if not task.done():
            asyncio.get_running_loop().create_task(turns.request_stop(conversation_id=admitted.conversation.pk))
        raise

"""The OpenAI-compatible endpoint (R2): `GET /v1/models` lists the agents a key reaches, `GET /v1/models/{id}`
shows one, and `POST /v1/chat/completions` runs a turn of one (`model` is the agent's API name). Every other /v1
path, and every refusal, answers OpenAI's error object. The request is read in api.openai_request, the answer
written in api.openai_answers (docs/api.md lists each field).

Two ways to give the context:
- stateless (the default): the request's `messages` are the history. They are stored as a new conversation (so the
  agent's token-overflow strategy applies to them, and the turn can be read later), and the last user message is
  answered;
- continued: a conversation id (header `X-Conversation-Id` or `metadata.conversation_id`) continues that stored
  conversation, and only the last user message of `messages` is sent.

The client's own `tools` are offered to the agent's model beside the agent's tools (which still run here); a call
of one ends the reply with `finish_reason: "tool_calls"`, and the client's next request (the whole history, with the
assistant's tool calls and its `tool` messages after the last user message) continues the turn. `response_format`,
`max_tokens` (within the agent's longest reply), `temperature`, `top_p`, `stop` and `seed` go to the model
(llm.options); `n` > 1 is refused.

The turn is the chat's turn (engine.turns): stored, claimed, streamed to open chat pages as well, stopped when the
client goes away. Answers follow OpenAI's shapes; what only this platform knows (the conversation id, tool and plan
progress) rides in extra fields (`conversation_id`, `agentplat`) that standard clients ignore.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.crypto import salted_hmac
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt

from agents.models import Agent
from agents.runtime import TurnStatus
from agents.sinks import QueueSink
from api.attachment_fetch import FetchRefused, fetch_image
from api.keys import KeyAccess, KeyRefused, key_agent
from api.models import KeyScope
from api.openai_answers import Chunks, Ending, answer, stream, turn_error
from api.openai_parts import FilePart
from api.openai_request import ApiError, CompletionRequest, parse_completion_request
from api.throttling import authorize
from core.conf import setting
from core.db import database_sync_to_async
from engine import admission, turns
from engine.admission import Admitted, Refusal, RefusalCode, Target
from engine.places import holding
from engine.turns import Outcome
from memory.attachments import Upload
from memory.models import ConversationSource
from tenants.generation import read_once
from tenants.scope import tenant_scope

logger = logging.getLogger("api.openai")

KEY_ERROR_KINDS = {403: "permission_error", 429: "rate_limit_error"}


def _access(authorization: str | None, *scopes: str) -> KeyAccess:
    """The request's key, checked for `scopes` (any of them) and the key's rate (run on the database thread)."""
    try:
        return authorize(authorization, *scopes)
    except KeyRefused as exc:
        kind = KEY_ERROR_KINDS.get(exc.status, "authentication_error")
        raise ApiError(exc.status, exc.message, code=exc.code, kind=kind, retry_after=exc.retry_after) from None


def _model_entry(agent: Agent, owner: str) -> dict[str, Any]:
    created = agent.created_at.timestamp() if agent.created_at else time.time()
    return {
        "id": agent.slug,
        "object": "model",
        "created": int(created),
        "owned_by": owner,
        "name": agent.name,
        "description": agent.description,
        "kind": agent.kind,
    }


def _models(authorization: str | None) -> dict[str, Any]:
    access = _access(authorization, KeyScope.READ, KeyScope.CHAT)
    with tenant_scope(access.tenant):
        agents = list(access.agents().order_by("slug"))
    return {"object": "list", "data": [_model_entry(agent, access.tenant.slug) for agent in agents]}


@csrf_exempt  # a key, never a session: no CSRF token (and a POST gets the 405 below, not an HTML 403)
async def models(request: HttpRequest) -> HttpResponse:
    """GET /v1/models: the agents this key reaches, as OpenAI models."""
    if request.method != "GET":
        return ApiError(405, _("Use GET."), code="method_not_allowed").response()
    try:
        body = await database_sync_to_async(_models)(request.headers.get("Authorization"))
    except ApiError as exc:
        return exc.response()
    return JsonResponse(body, json_dumps_params={"ensure_ascii": False})


def _model(authorization: str | None, model_id: str) -> dict[str, Any]:
    access = _access(authorization, KeyScope.READ, KeyScope.CHAT)
    with tenant_scope(access.tenant):
        agent = access.agents().filter(slug=model_id).first()
    if agent is None:
        raise ApiError(404, _("No agent “%(model)s” for this key. GET /v1/models lists them.") % {"model": model_id},
                       code="model_not_found", param="model")  # fmt: skip
    return _model_entry(agent, access.tenant.slug)


@csrf_exempt
async def model(request: HttpRequest, model_id: str) -> HttpResponse:
    """GET /v1/models/{id}: one agent this key reaches, as an OpenAI model (404 for any other)."""
    if request.method != "GET":
        return ApiError(405, _("Use GET."), code="method_not_allowed").response()
    try:
        body = await database_sync_to_async(_model)(request.headers.get("Authorization"), model_id)
    except ApiError as exc:
        return exc.response()
    return JsonResponse(body, json_dumps_params={"ensure_ascii": False})


@csrf_exempt
async def unknown(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any other /v1/... path: OpenAI's error object, not an HTML page."""
    message = _("No such endpoint: %(method)s %(path)s. This API serves GET /v1/models, GET /v1/models/{id} and "
                "POST /v1/chat/completions.") % {"method": request.method, "path": request.path}  # fmt: skip
    return ApiError(404, message, code="unknown_url").response()


# --- chat/completions -------------------------------------------------------------------------------------------


@dataclass
class Prepared:
    access: KeyAccess
    agent: Agent


def _prepare(authorization: str | None, ask: CompletionRequest) -> Prepared:
    """The key and the agent of a request (one hop to the database thread); the conversation is admission's."""
    with read_once():
        access = _access(authorization, KeyScope.CHAT)
        with tenant_scope(access.tenant):
            agent = key_agent(access, ask.model)
    if agent is None:
        raise ApiError(
            404, _("No agent “%(model)s” for this key. GET /v1/models lists them.") % {"model": ask.model},
            code="model_not_found", param="model",
        )  # fmt: skip
    return Prepared(access=access, agent=agent)


# The request field a refusal is about (OpenAI's `param`), and OpenAI's error type by status.
REFUSAL_PARAMS = {
    RefusalCode.CONVERSATION_NOT_FOUND: "metadata.conversation_id",
    RefusalCode.TOOL_RESULTS_PENDING: "metadata.conversation_id",
    RefusalCode.EMPTY_MESSAGE: "messages",
    RefusalCode.MESSAGE_TOO_LONG: "messages",
    RefusalCode.INVALID_CHARACTERS: "messages",
    RefusalCode.INVALID_CLIENT_ID: "metadata.idempotency_key",
}
# The refusals about one of the request's files.
ATTACHMENT_REFUSALS = {RefusalCode.ATTACHMENT_NOT_FOUND, RefusalCode.ATTACHMENT_REFUSED}
REFUSAL_KINDS = {404: "invalid_request_error", 409: "conflict_error", 429: "rate_limit_error", 503: "server_error"}


def _refused_part(refusal: Refusal, files: Sequence[FilePart]) -> str | None:
    """The content part a refused file came from (messages[i].content[j]): the one file of its kind (an uploaded
    file's id not found, or a file sent inline refused), or the one the refusal names (its index among the
    uploads, or its id); None when it cannot tell."""
    by_id = refusal.code == RefusalCode.ATTACHMENT_NOT_FOUND
    candidates = [file for file in files if (file.attachment_id is not None) == by_id]
    index, attachment = refusal.params.get("upload"), refusal.params.get("attachment")
    if not by_id and isinstance(index, int) and 0 <= index < len(candidates):
        return candidates[index].where
    named = [file.where for file in candidates if attachment is not None and file.attachment_id == attachment]
    if named:
        return named[0]
    return candidates[0].where if len(candidates) == 1 else None


def refusal_error(refusal: Refusal, files: Sequence[FilePart] = ()) -> ApiError:
    """The engine's refusal in OpenAI's error shape; a refused file names its content part."""
    param = REFUSAL_PARAMS.get(refusal.code)
    if refusal.code in ATTACHMENT_REFUSALS and files:
        param = _refused_part(refusal, files) or files[0].where.rsplit("[", 1)[0]
    return ApiError(
        refusal.status, refusal.message, code=str(refusal.code), param=param,
        kind=REFUSAL_KINDS.get(refusal.status, "invalid_request_error"), retry_after=refusal.retry_after,
    )  # fmt: skip


def _body(request: HttpRequest) -> bytes:
    """The request's body, up to what its files may need: a request may carry ATTACHMENTS_PER_MESSAGE files of
    ATTACHMENT_MAX_BYTES each, base64 (4/3 larger), beside Django's bound for the rest (DATA_UPLOAD_MAX_MEMORY_SIZE).
    Read past `request.body`, whose bound is Django's alone."""
    files = int(setting("ATTACHMENT_MAX_BYTES")) * int(setting("ATTACHMENTS_PER_MESSAGE")) * 4 // 3
    limit = files + (settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0)
    try:
        size = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        size = 0
    if size > limit:
        raise ApiError(413, _("The request body is larger than %(max)s MB.") % {"max": limit // (1024 * 1024)},
                       code="request_too_large")  # fmt: skip
    return request.read(limit + 1)


async def _fetched(file: FilePart) -> bytes:
    """An http(s) image URL's bytes through the network guard; an ApiError naming the part when refused."""
    try:
        return await fetch_image(file.url or "")
    except FetchRefused as exc:
        raise ApiError(400, exc.message, code="image_url_unavailable", param=file.where) from None


async def _files(files: Sequence[FilePart]) -> tuple[list[Upload], list[int]]:
    """The last user message's files as the admission takes them: bytes (the http(s) image URLs fetched at once
    through the network guard) and uploaded attachments' ids."""
    urls = [file for file in files if file.url is not None]
    fetched = iter(await asyncio.gather(*(_fetched(file) for file in urls)))
    uploads = [
        Upload(name=file.name, data=next(fetched) if file.url is not None else file.data or b"")
        for file in files
        if file.attachment_id is None
    ]
    return uploads, [file.attachment_id for file in files if file.attachment_id is not None]


def _completion_id(user_message_id: int) -> str:
    """One id per turn, from the stored user message (a resent idempotency key gets the same id), keyed with the
    secret key: random to a client, so it tells nothing of how busy the platform is."""
    digest = salted_hmac("api.openai.completion-id", str(user_message_id), algorithm="sha256").hexdigest()
    return f"chatcmpl-{digest[:29]}"


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    """POST /v1/chat/completions."""
    if request.method != "POST":
        return ApiError(405, _("Use POST."), code="method_not_allowed").response()
    try:
        ask = parse_completion_request(_body(request), request.headers)
        prepared = await database_sync_to_async(_prepare)(request.headers.get("Authorization"), ask)
        uploads, attachment_ids = await _files(ask.files)
    except ApiError as exc:
        return exc.response()
    sink = QueueSink()
    decision = await admission.admit(
        caller=prepared.access.caller(ConversationSource.API),
        target=Target(agent=prepared.agent, conversation_id=ask.conversation_id, history=ask.history),
        content=ask.content, client_id=ask.client_id or f"api-{uuid.uuid4().hex}", stream=ask.stream,
        then=ask.tool_round, options=ask.options, also=sink, attachments=attachment_ids, uploads=uploads,
    )  # fmt: skip
    if isinstance(decision, Refusal):
        return refusal_error(decision, ask.files).response()
    response = None
    try:
        response = await _complete(ask, prepared, decision, sink)
        return response
    finally:
        # A streamed answer keeps its place until the stream ends (engine.places.holding); any other answer frees it.
        if decision.slot is not None and not getattr(response, "holds_stream_slot", False):
            await decision.slot.arelease()


async def _complete(ask: CompletionRequest, prepared: Prepared, admitted: Admitted, sink: QueueSink) -> HttpResponse:
    conversation, submission = admitted.conversation, admitted.submission
    headers = {"X-Conversation-Id": str(conversation.pk)}
    common = {"model": prepared.agent.slug, "created": int(time.time()), "conversation_id": conversation.pk}
    completion_id = _completion_id(submission.message.pk)
    if submission.outcome == Outcome.DUPLICATE:
        ending = Ending(submission.reply.content if submission.reply else "")
        return answer(common, completion_id, ending, None, headers, ask)
    task = submission.task
    assert task is not None
    task.add_done_callback(lambda _task: sink.queue.put_nowait(None))
    if ask.stream:
        chunks = stream(task, sink, Chunks(common, completion_id, ask.include_usage), ask, conversation.pk)
        response = StreamingHttpResponse(holding(admitted.slot, chunks), content_type="text/event-stream",
                                         headers=headers)  # fmt: skip
        response.holds_stream_slot = True
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    try:
        result = await asyncio.shield(task)
    except asyncio.CancelledError:  # the client went away: stop the turn (what was written is stored)
        await turns.request_stop(conversation_id=conversation.pk)
        raise
    if result is None or result.status == TurnStatus.FAILED:
        response = turn_error(result).response()
        response["X-Conversation-Id"] = str(conversation.pk)
        return response
    return answer(common, completion_id, Ending.of(result), result, headers, ask)

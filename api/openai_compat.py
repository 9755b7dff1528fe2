"""The OpenAI-compatible endpoint (R2): `GET /v1/models` lists the agents a key reaches and
`POST /v1/chat/completions` runs a turn of one (`model` is the agent's API name).

Two ways to give the context:
- stateless (the default): the request's `messages` are the history. They are stored as a new conversation (so the
  agent's token-overflow strategy applies to them, and the turn can be read later), and the last user message is
  answered;
- continued: a conversation id (header `X-Conversation-Id` or `metadata.conversation_id`) continues that stored
  conversation, and only the last user message of `messages` is sent.

The turn is the chat's turn (engine.turns): stored, claimed, streamed to open chat pages as well, stopped when the
client goes away. Answers follow OpenAI's shapes; what only this platform knows (the conversation id, tool and plan
progress) rides in extra fields (`conversation_id`, `agentplat`) that standard clients ignore.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt

from agents import frames
from agents.models import Agent
from agents.runtime import TurnResult, TurnStatus
from agents.services import conversation_start
from agents.sinks import QueueSink
from api.keys import KeyAccess, KeyRefused, caller_conversation
from api.models import KeyScope
from api.parsers import unstorable_at, unstorable_message
from api.throttling import StreamSlot, admit, holding, stream_slot_take
from core.bounded import loads_json
from core.conf import setting
from core.db import database_sync_to_async
from engine import turns
from llm import errors
from llm.messages import ChatMessage
from memory.models import Conversation, Role
from memory.services import messages_import, title_from
from tenants.scope import tenant_scope

logger = logging.getLogger("api.openai")

MAX_MESSAGES = 500
MAX_CONTENT_CHARS = 20_000
MAX_CLIENT_ID_CHARS = 100
# The roles a client may send; `developer` is OpenAI's newer name for `system`.
CLIENT_ROLES = {"system", "developer", "user", "assistant"}


class ApiError(Exception):
    """An answer in OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self, status: int, message: str, *, code: str, kind: str = "invalid_request_error", param: str | None = None,
        retry_after: float | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.code, self.kind, self.param = status, message, code, kind, param
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def response(self) -> JsonResponse:
        response = JsonResponse(self.body(), status=self.status, json_dumps_params={"ensure_ascii": False})
        if self.retry_after is not None:
            response["Retry-After"] = str(max(1, round(self.retry_after)))
        return response


KEY_ERROR_KINDS = {403: "permission_error", 429: "rate_limit_error"}


def _access(authorization: str | None, *scopes: str) -> KeyAccess:
    """The request's key, checked for `scopes` (any of them) and the key's rate (run on the database thread)."""
    try:
        return admit(authorization, *scopes)
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


async def models(request: HttpRequest) -> HttpResponse:
    """GET /v1/models: the agents this key reaches, as OpenAI models."""
    if request.method != "GET":
        return ApiError(405, _("Use GET."), code="method_not_allowed").response()
    try:
        body = await database_sync_to_async(_models)(request.headers.get("Authorization"))
    except ApiError as exc:
        return exc.response()
    return JsonResponse(body, json_dumps_params={"ensure_ascii": False})


# --- chat/completions -------------------------------------------------------------------------------------------


@dataclass
class CompletionRequest:
    model: str
    history: list[ChatMessage]  # the messages before the last user message; system messages left out
    content: str  # the last user message
    stream: bool
    include_usage: bool
    conversation_id: int | None
    client_id: str | None


def _text(content: Any, n: int) -> str:
    """A message's content: a string, or OpenAI's list of parts of which only text parts are read."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(
                    400, _("Only text content is supported (messages[%(n)s]).") % {"n": n},
                    code="unsupported_content", param=f"messages[{n}].content",
                )  # fmt: skip
            texts.append(part["text"])
        return "\n".join(texts)
    if content is None:
        return ""
    raise ApiError(400, _("messages[%(n)s].content must be a string.") % {"n": n}, code="invalid_type",
                   param=f"messages[{n}].content")  # fmt: skip


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, str) and value.strip().isdigit() and int(value) > 0:
        return int(value)
    return None


def parse_completion_request(raw: bytes, headers: Any) -> CompletionRequest:
    """Read and check a chat/completions body; ApiError (400) names the field that is wrong."""
    try:
        data = loads_json(raw or b"")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, _("The request body is not valid JSON."), code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, _("The request body must be a JSON object."), code="invalid_json")
    if (where := unstorable_at(data)) is not None:
        raise ApiError(
            400, unstorable_message(where), code="invalid_characters", param=where,
        )  # fmt: skip
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise ApiError(400, _("Name the agent in “model” (GET /v1/models lists them)."), code="missing_model",
                       param="model")  # fmt: skip
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, _("“messages” must be a non-empty list."), code="invalid_messages", param="messages")
    if len(messages) > MAX_MESSAGES:
        raise ApiError(400, _("Send at most %(n)s messages.") % {"n": MAX_MESSAGES}, code="too_many_messages",
                       param="messages")  # fmt: skip
    pairs: list[tuple[str, str]] = []
    for n, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in CLIENT_ROLES:
            raise ApiError(
                400, _("messages[%(n)s].role must be one of system, user, assistant.") % {"n": n},
                code="invalid_role", param=f"messages[{n}].role",
            )  # fmt: skip
        text = _text(message.get("content"), n)
        if len(text) > MAX_CONTENT_CHARS:
            raise ApiError(
                400, _("messages[%(n)s] is longer than %(max)s characters.") % {"n": n, "max": MAX_CONTENT_CHARS},
                code="message_too_long", param=f"messages[{n}].content",
            )  # fmt: skip
        pairs.append((message["role"], text))
    role, content = pairs[-1]
    if role != Role.USER or not content.strip():
        raise ApiError(400, _("The last message must be the user's, and not empty."), code="invalid_messages",
                       param=f"messages[{len(pairs) - 1}]")  # fmt: skip
    # The agent's own system prompt leads every request; a client's system messages are not sent to the model.
    history = [ChatMessage(role, text) for role, text in pairs[:-1] if role in (Role.USER, Role.ASSISTANT)]
    stream = data.get("stream", False)
    options = data.get("stream_options") or {}
    metadata = data.get("metadata") or {}
    if not isinstance(stream, bool) or not isinstance(options, dict) or not isinstance(metadata, dict):
        raise ApiError(400, _("“stream” must be true or false; “stream_options” and “metadata” objects."),
                       code="invalid_type")  # fmt: skip
    raw_conversation = headers.get("X-Conversation-Id") or metadata.get("conversation_id")
    conversation_id = _positive_int(raw_conversation) if raw_conversation not in (None, "") else None
    if raw_conversation not in (None, "") and conversation_id is None:
        raise ApiError(400, _("The conversation id must be a positive integer."), code="invalid_conversation",
                       param="metadata.conversation_id")  # fmt: skip
    client_id = headers.get("Idempotency-Key") or metadata.get("client_id")
    if client_id is not None and (not isinstance(client_id, str) or not 0 < len(client_id) <= MAX_CLIENT_ID_CHARS):
        raise ApiError(400, _("The idempotency key must be a string of at most %(n)s characters.")
                       % {"n": MAX_CLIENT_ID_CHARS}, code="invalid_client_id")  # fmt: skip
    return CompletionRequest(
        model=model.strip(),
        history=history,
        content=content,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        conversation_id=conversation_id,
        client_id=client_id,
    )


@dataclass
class Prepared:
    access: KeyAccess
    agent: Agent
    conversation: Conversation
    slot: StreamSlot | None = None  # a streamed reply's place among the tenant's (api.throttling)


def _prepare(authorization: str | None, ask: CompletionRequest) -> Prepared:
    """The key, the agent and the conversation of a request (one hop to the database thread)."""
    access = _access(authorization, KeyScope.CHAT)
    with tenant_scope(access.tenant):
        agent = access.agents().filter(slug=ask.model).first()
        if agent is None:
            raise ApiError(
                404, _("No agent “%(model)s” for this key. GET /v1/models lists them.") % {"model": ask.model},
                code="model_not_found", param="model",
            )  # fmt: skip
        if ask.conversation_id is not None:
            try:
                conversation = caller_conversation(
                    conversation_id=ask.conversation_id, user=access.user, membership=access.membership, access=access
                )
            except Conversation.DoesNotExist:
                conversation = None
            if conversation is None or conversation.agent_id != agent.pk:
                raise ApiError(404, _("No such conversation of this agent."), code="conversation_not_found",
                               param="metadata.conversation_id")  # fmt: skip
        slot = _stream_slot(access) if ask.stream else None
        if ask.conversation_id is None:
            try:
                with transaction.atomic():  # the history is stored whole or not at all
                    conversation = conversation_start(
                        agent=agent, user=access.user, title=title_from(ask.content), source="api"
                    )
                    messages_import(conversation=conversation, messages=ask.history)
            except BaseException:
                if slot is not None:
                    slot.release()
                raise
    return Prepared(access=access, agent=agent, conversation=conversation, slot=slot)


def _stream_slot(access: KeyAccess) -> StreamSlot | None:
    """A place for one more streamed reply of the key's tenant (API_TENANT_MAX_STREAMS), or ApiError 429."""
    try:
        return stream_slot_take(access.tenant.pk)
    except KeyRefused as exc:
        raise ApiError(exc.status, exc.message, code=exc.code, kind="rate_limit_error",
                       retry_after=exc.retry_after) from None  # fmt: skip


def _completion_id(user_message_id: int) -> str:
    """One id per turn, from the stored user message (a resent idempotency key gets the same id)."""
    return f"chatcmpl-{user_message_id}"


def _usage(result: TurnResult | None) -> dict[str, int]:
    prompt = result.usage.prompt_tokens if result else 0
    completion = result.usage.completion_tokens if result else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _turn_error(result: TurnResult | None) -> ApiError:
    code = (result.error_code if result else "") or errors.PROVIDER_ERROR
    status = {errors.QUOTA_EXCEEDED: 429, errors.RATE_LIMITED: 429, errors.PROVIDER_TIMEOUT: 504}.get(code, 502)
    kind = "insufficient_quota" if code == errors.QUOTA_EXCEEDED else "api_error"
    return ApiError(status, errors.message_for(code), code=code, kind=kind)


def _submission_error(outcome: str) -> ApiError:
    if outcome == "busy":
        return ApiError(409, _("Another reply of this conversation is being written. Retry when it has ended."),
                        code="conversation_busy", kind="conflict_error")  # fmt: skip
    seconds = setting("CHAT_BUSY_RETRY_SECONDS")
    return ApiError(503, _("The platform is busy. Retry in %(seconds)s s.") % {"seconds": seconds},
                    code="overloaded", kind="server_error", retry_after=seconds)  # fmt: skip


def _progress(frame: frames.Frame) -> dict[str, Any] | None:
    """Tool, step and plan frames as the `agentplat` extra field of an empty chunk (ignored by standard clients)."""
    if isinstance(frame, frames.Tool | frames.Step | frames.Plan):
        return frame.as_dict()
    if isinstance(frame, frames.Delta) and frame.index != 0:
        return frame.as_dict()
    return None


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    """POST /v1/chat/completions."""
    if request.method != "POST":
        return ApiError(405, _("Use POST."), code="method_not_allowed").response()
    try:
        ask = parse_completion_request(request.body, request.headers)
        prepared = await database_sync_to_async(_prepare)(request.headers.get("Authorization"), ask)
    except ApiError as exc:
        return exc.response()
    response = None
    try:
        response = await _complete(ask, prepared)
        return response
    finally:
        # A streamed answer keeps its place until the stream ends (api.throttling.holding); any other answer frees it.
        if prepared.slot is not None and not getattr(response, "holds_stream_slot", False):
            await prepared.slot.arelease()


async def _complete(ask: CompletionRequest, prepared: Prepared) -> HttpResponse:
    conversation = prepared.conversation
    sink = QueueSink()
    with tenant_scope(prepared.access.tenant):
        submission = await turns.submit_user_message(
            conversation=conversation,
            client_id=ask.client_id or f"api-{uuid.uuid4().hex}",
            content=ask.content,
            also=sink,
        )
    headers = {"X-Conversation-Id": str(conversation.pk)}
    if submission.outcome in ("busy", "overloaded"):
        response = _submission_error(submission.outcome).response()
        response["X-Conversation-Id"] = str(conversation.pk)
        return response
    common = {"model": prepared.agent.slug, "created": int(time.time()), "conversation_id": conversation.pk}
    completion_id = _completion_id(submission.message.pk)
    if submission.outcome == "duplicate":
        reply = submission.reply
        return _answer(common, completion_id, reply.content if reply else "", None, headers, ask)
    task = submission.task
    assert task is not None
    task.add_done_callback(lambda _task: sink.queue.put_nowait(None))
    if ask.stream:
        chunks = _stream(task, sink, _Chunks(common, completion_id, ask.include_usage), ask, conversation.pk)
        response = StreamingHttpResponse(holding(prepared.slot, chunks), content_type="text/event-stream",
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
        response = _turn_error(result).response()
        response["X-Conversation-Id"] = str(conversation.pk)
        return response
    return _answer(common, completion_id, result.message.content, result, headers, ask)


def _answer(
    common: dict[str, Any], completion_id: str, content: str, result: TurnResult | None, headers: dict[str, str],
    ask: CompletionRequest,
) -> HttpResponse:  # fmt: skip
    """The non-streamed answer (a resent idempotency key gets the stored reply, streamed or not)."""
    if ask.stream:
        chunks = _chunks_for_text(_Chunks(common, completion_id, ask.include_usage), content, result, ask)
        return StreamingHttpResponse(chunks, content_type="text/event-stream", headers=headers)
    body = {
        "id": completion_id,
        "object": "chat.completion",
        **common,
        "choices": [
            {
                "index": 0,
                "message": ChatMessage.assistant(content).as_dict(),
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": _usage(result),
    }
    if result is not None and result.status != TurnStatus.COMPLETED:
        body["agentplat"] = {"status": str(result.status)}
    return JsonResponse(body, headers=headers, json_dumps_params={"ensure_ascii": False})


def _sse(data: dict[str, Any] | str) -> str:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n"


class _Chunks:
    """Builds the chunks of one streamed answer."""

    def __init__(self, common: dict[str, Any], completion_id: str, include_usage: bool) -> None:
        self.common = common
        self.completion_id = completion_id
        self.include_usage = include_usage

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> str:
        data = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            **self.common,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
            **extra,
        }
        if self.include_usage:
            data["usage"] = None
        return _sse(data)

    def usage(self, result: TurnResult | None) -> str:
        return _sse(
            {"id": self.completion_id, "object": "chat.completion.chunk", **self.common, "choices": [],
             "usage": _usage(result)}
        )  # fmt: skip


async def _chunks_for_text(
    chunks: _Chunks, content: str, result: TurnResult | None, ask: CompletionRequest
) -> AsyncIterator[str]:
    yield chunks.chunk(ChatMessage.assistant("").as_dict())
    if content:
        yield chunks.chunk({"content": content})
    yield chunks.chunk({}, "stop")
    if ask.include_usage:
        yield chunks.usage(result)
    yield _sse("[DONE]")


async def _stream(
    task: asyncio.Task, sink: QueueSink, chunks: _Chunks, ask: CompletionRequest, conversation_id: int
) -> AsyncIterator[str]:
    """The turn's frames as chat.completion.chunk events, ending with [DONE]; a client that goes away stops the
    turn (the partial reply is stored)."""
    sent: list[str] = []
    try:
        yield chunks.chunk(ChatMessage.assistant("").as_dict())
        while True:
            frame = await sink.queue.get()
            if frame is None:
                break
            if isinstance(frame, frames.Delta) and frame.index == 0:
                sent.append(frame.content)
                yield chunks.chunk({"content": frame.content})
            elif (progress := _progress(frame)) is not None:
                yield chunks.chunk({}, agentplat=progress)
        result = task.result()
        if result is None or result.status == TurnStatus.FAILED:
            yield _sse(_turn_error(result).body())
            yield _sse("[DONE]")
            return
        written, stored = "".join(sent), result.message.content
        if stored != written:  # a runner that said its answer at once, or replaced what it streamed
            rest = stored[len(written) :] if stored.startswith(written) else stored
            if rest:
                yield chunks.chunk({"content": rest})
        extra = {} if result.status == TurnStatus.COMPLETED else {"agentplat": {"status": str(result.status)}}
        yield chunks.chunk({}, "stop", **extra)
        if ask.include_usage:
            yield chunks.usage(result)
        yield _sse("[DONE]")
    except (asyncio.CancelledError, GeneratorExit):
        if not task.done():
            asyncio.get_running_loop().create_task(turns.request_stop(conversation_id=conversation_id))
        raise

"""The platform as an MCP server: `/mcp` (streamable HTTP), each published agent a key may use one MCP tool.

A request is authenticated with the tenant's API keys (`Authorization: Bearer ak-…`, the `mcp` scope, the key's
rate) before the `mcp` package's server sees it; the key's access rides in the ASGI scope, where the handlers read it
(`ctx.request`), and each handler works in the key's tenant scope. The tool list is read from the database on every
`tools/list`, so it follows publishing at once. A call starts its turn through the engine's one admission
(engine.admission), as every other door does: the conversation is the platform's own (source MCP), continued with its
id by the key's member only.

The server runs stateless (no session to keep between requests, no stream left open: GET, the spec's
server-to-client stream, is answered 405) and answers JSON, but for a tools/call that asks for progress (a
`_meta.progressToken`, from a client that accepts text/event-stream): that one is answered as an SSE stream of
progress notifications while the turn runs, then its result (api.mcp_progress). Tool names come from the agents' API
names (api.mcp_names). A browser's request (one with an Origin) is taken only from this site's hosts or
MCP_ALLOWED_ORIGINS. A request refused at the door (its host, origin, method or key) is answered with its HTTP status
and a JSON-RPC error (the request's id, the refusal's message, the platform's code in `data`): the `mcp` client
shows a JSON-RPC error body of a non-2xx answer, and nothing else of it; OAuth-minded clients read the same words at
the registration endpoint api.mcp_oauth names. The session managers (one answering JSON, one SSE) still need a
running task group (`run()`), which a Starlette app would enter in its lifespan; Daphne does not send lifespan
events, so they are started on the first request, in a task of the server's event loop that lives as long as that
loop (one pair per loop).
"""

from __future__ import annotations

import asyncio
import json
import tomllib
import uuid
import weakref
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from asgiref.typing import ASGIReceiveCallable, ASGISendCallable, Scope
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils import translation
from django.utils.translation import gettext as _
from mcp import MCPError
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import INVALID_PARAMS, CallToolRequestParams, CallToolResult, ListToolsResult, TextContent, Tool

from agents.models import Agent
from agents.runtime import TurnStatus
from api.keys import KeyAccess, KeyRefused
from api.mcp_names import aliases, tool_names
from api.mcp_progress import TurnProgress
from api.models import KeyScope
from api.throttling import authorize
from core.conf import setting
from core.db import database_sync_to_async
from engine import admission
from engine.admission import Refusal, Target
from llm import errors
from memory.models import ConversationSource
from tenants.scope import tenant_scope

PATH = "/mcp"
# The JSON-RPC error code of a request refused before the MCP server reads it (host, origin, method, key): one of the
# codes JSON-RPC leaves to servers, none the `mcp` package uses. `data.code` says which refusal (invalid_api_key...).
REFUSED = -32010
# How much of a refused request's body is read to find its JSON-RPC id (a bigger body is answered with id null).
REFUSED_BODY_MAX_BYTES = 65536
ACCESS_KEY = "agentplat.key_access"
LANGUAGE_KEY = "agentplat.language"
STREAMS_KEY = "agentplat.streams"
INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "minLength": 1, "description": "What to ask the agent / 发给智能体的消息"},
        "conversation_id": {
            "type": "integer",
            "description": "Continue this conversation (from an earlier answer) / 继续此前的对话",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}


def _platform_version() -> str:
    """The platform's version, as pyproject.toml declares it (serverInfo.version)."""
    try:
        with (settings.BASE_DIR / "pyproject.toml").open("rb") as project:
            return str(tomllib.load(project)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


VERSION = _platform_version()


def _names() -> dict[int, str]:
    """The tool name of each agent of the current tenant (api.mcp_names), by id."""
    return tool_names(Agent.objects.values_list("pk", "slug"))


def _agent_tools(access: KeyAccess) -> list[Tool]:
    with tenant_scope(access.tenant):
        agents = list(access.agents().order_by("name"))
        names = _names()
    return [
        Tool(
            name=names[agent.pk],
            title=agent.name,
            description=agent.description or _("Ask the agent “%(name)s”.") % {"name": agent.name},
            input_schema=INPUT_SCHEMA,
        )
        for agent in agents
    ]


def _access(ctx: Any) -> KeyAccess:
    return ctx.request.scope[ACCESS_KEY]


def _language(ctx: Any) -> str:
    """The caller's language (Accept-Language), for the handlers: they run in the session manager's task, outside
    the request's context, so it is carried in the ASGI scope."""
    return ctx.request.scope[LANGUAGE_KEY]


async def list_agent_tools(ctx: Any, params: Any) -> ListToolsResult:
    with translation.override(_language(ctx)):
        return ListToolsResult(tools=await database_sync_to_async(_agent_tools)(_access(ctx)))


def failed(text: str, code: str = "") -> CallToolResult:
    """A tool error the client reads (with the refusal's code as structured content when there is one)."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)], is_error=True,
        structured_content={"error": {"code": code, "message": text}} if code else None,
    )  # fmt: skip


class CallRefused(Exception):
    """A call that cannot start; the message is the tool result the client reads."""


@dataclass
class _Call:
    message: Any
    conversation_id: int | None


def _arguments(arguments: Any) -> _Call:
    """The call's arguments in their shapes; what the message may hold is the engine's admission's decision."""
    arguments = arguments if isinstance(arguments, dict) else {}
    conversation_id = arguments.get("conversation_id")
    if conversation_id is not None and (isinstance(conversation_id, bool) or not isinstance(conversation_id, int)):
        raise CallRefused(_("conversation_id must be the number an earlier answer gave."))
    return _Call(message=arguments.get("message"), conversation_id=conversation_id)


def _agent(access: KeyAccess, name: str) -> Agent:
    """The agent the tool `name` stands for, among the key's (by its name, else by a name it had: api.mcp_names); an
    unknown tool is the protocol's error (-32602, as the MCP specification answers an unknown tool), not a tool
    result."""
    with tenant_scope(access.tenant):
        agents, names = list(access.agents()), _names()
    agent = next((a for a in agents if names.get(a.pk) == name), None)
    if agent is None:
        agent = next((a for a in agents if name in aliases(a.pk, a.slug, names.get(a.pk, ""))), None)
    if agent is None:
        message = _("No agent “%(name)s” for this key: list the tools again.") % {"name": name}
        raise MCPError(INVALID_PARAMS, message, data={"tool": name})
    return agent


async def _call_agent(
    access: KeyAccess, params: CallToolRequestParams, progress: TurnProgress | None = None
) -> CallToolResult:
    agent = await database_sync_to_async(_agent)(access, params.name)
    try:
        call = _arguments(params.arguments)
    except CallRefused as exc:
        return failed(str(exc))
    decision = await admission.admit(
        caller=access.caller(ConversationSource.MCP), target=Target(agent=agent, conversation_id=call.conversation_id),
        content=call.message, client_id=f"mcp-{uuid.uuid4().hex}", also=progress,
    )  # fmt: skip
    if isinstance(decision, Refusal):
        return failed(decision.message, code=str(decision.code))
    if progress is not None:
        progress.start()
    try:
        result = await decision.submission.task
    finally:
        if progress is not None:
            await progress.stop()  # the result is the stream's last message
    if result is None or result.status == TurnStatus.FAILED:
        return failed(errors.message_for((result.error_code if result else "") or errors.PROVIDER_ERROR))
    reply, conversation_id = result.message.content, decision.conversation.pk
    # The reply, then the conversation's id for the next call (also as structured content, for clients that read it).
    ids = json.dumps({"conversation_id": conversation_id})
    return CallToolResult(
        content=[TextContent(type="text", text=reply), TextContent(type="text", text=ids)],
        structured_content={"reply": reply, "conversation_id": conversation_id},
    )


def _progress(ctx: Any, access: KeyAccess) -> TurnProgress | None:
    """The call's progress reporter: when it asked for progress (a token) and is answered as a stream."""
    token = (ctx.meta or {}).get("progress_token")
    if token is None or not ctx.request.scope.get(STREAMS_KEY):
        return None
    return TurnProgress(ctx.session, token, ctx.request_id, access.tenant, _language(ctx))


async def call_agent_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
    with translation.override(_language(ctx)):
        return await _call_agent(_access(ctx), params, _progress(ctx, _access(ctx)))


def _server() -> Server:
    return Server("agentplat", version=VERSION, on_list_tools=list_agent_tools, on_call_tool=call_agent_tool)


class _Running:
    """The session managers running in one event loop (their task groups live in a task of that loop): one answers
    JSON, the other SSE (a tools/call that asked for progress)."""

    def __init__(self) -> None:
        # Host and origin are checked by mount_mcp against ALLOWED_HOSTS, as Django checks them.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.json, self.sse = (
            StreamableHTTPSessionManager(
                app=_server(), json_response=json_response, stateless=True, security_settings=security
            )
            for json_response in (True, False)
        )
        self.started = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run(), name="mcp-session-manager")

    async def _run(self) -> None:
        async with self.json.run(), self.sse.run():
            self.started.set()
            await asyncio.Event().wait()  # until the loop ends (the task is cancelled with it)


_running: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Running] = weakref.WeakKeyDictionary()


async def session_manager(streams: bool = False) -> StreamableHTTPSessionManager:
    """The running session manager of this event loop (started on first use): the SSE one when `streams`."""
    loop = asyncio.get_running_loop()
    running = _running.get(loop)
    if running is None:
        running = _running[loop] = _Running()
    await running.started.wait()
    return running.sse if streams else running.json


async def _body(receive: ASGIReceiveCallable) -> bytes:
    """The request's whole body (the MCP transport reads it whole too)."""
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return body
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def _replay(body: bytes, receive: ASGIReceiveCallable) -> ASGIReceiveCallable:
    """`receive` with the body already read handed out again first."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Any:
        return pending.pop() if pending else await receive()

    return replayed


def wants_progress(body: bytes, accept: str | None) -> bool:
    """Whether the request is a tools/call with `_meta.progressToken` from a client that takes an SSE answer."""
    if b"progressToken" not in body or "text/event-stream" not in (accept or ""):
        return False
    try:
        request = json.loads(body)
    except ValueError:
        return False
    params = request.get("params") if isinstance(request, dict) and request.get("method") == "tools/call" else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return isinstance(token, str | int) and not isinstance(token, bool)


async def _request_id(receive: ASGIReceiveCallable) -> str | int | None:
    """The JSON-RPC id of a request about to be refused (None when its body is not one request, or too big)."""
    body = b""
    while len(body) <= REFUSED_BODY_MAX_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    else:
        return None
    try:
        request = json.loads(body)
    except ValueError:
        return None
    request_id = request.get("id") if isinstance(request, dict) else None
    return request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None


async def _refuse(
    receive: ASGIReceiveCallable, send: ASGISendCallable, status: int, code: str, message: str,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:  # fmt: skip
    """Answer `status` with a JSON-RPC error: the message is what an MCP client shows, `data.code` the refusal."""
    request_id = await _request_id(receive)
    body = {"jsonrpc": "2.0", "id": request_id,
            "error": {"code": REFUSED, "message": message, "data": {"code": code, "status": status}}}  # fmt: skip
    payload = json.dumps(body, ensure_ascii=False).encode()
    base = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": base + (headers or [])})
    await send({"type": "http.response.body", "body": payload})


def _header(scope: Scope, name: bytes) -> str | None:
    return next((value.decode("latin-1") for key, value in scope["headers"] if key == name), None)


def _request_language(scope: Scope) -> str:
    """The supported language the request's Accept-Language asks for (else the platform's default)."""
    meta = {"HTTP_ACCEPT_LANGUAGE": _header(scope, b"accept-language") or ""}
    return translation.get_language_from_request(SimpleNamespace(COOKIES={}, META=meta, path_info="/"))


def _authorize(authorization: str | None, language: str) -> KeyAccess:
    """The request's key, checked for the `mcp` scope and its rate; refusals in the caller's language."""
    with translation.override(language):
        return authorize(authorization, KeyScope.MCP)


def key_refusal(exc: KeyRefused) -> tuple[str, list[tuple[bytes, bytes]]]:
    """What an MCP client shows of a refused key (which refusal, and where a key comes from), and the headers: the
    Bearer challenge of RFC 6750 (error `invalid_token` for a key that was sent, `insufficient_scope` naming the
    scope), Retry-After over the key's rate."""
    if exc.status == 429:
        return exc.message, [(b"retry-after", str(max(1, round(exc.retry_after or 1))).encode())]
    message = _(
        "%(reason)s (%(code)s) Use an API key with the “mcp” scope, made on the API keys page (/api/keys/)."
    ) % {"reason": exc.message, "code": exc.code}
    challenge = 'Bearer realm="agentplat"'
    if exc.status == 403:
        challenge += ', error="insufficient_scope", scope="mcp"'
    elif exc.code != "missing_api_key":  # RFC 6750: no error code when no key was sent
        challenge += f', error="invalid_token", error_description="{exc.code}"'
    return message, [(b"www-authenticate", challenge.encode())]


async def mcp_endpoint(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    """/mcp: the host, origin, method and key checked (each refusal a JSON-RPC error with its HTTP status), then the
    MCP server in the key's access."""
    language = _request_language(scope)
    domain, _port = split_domain_port(_header(scope, b"host") or "")
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        with translation.override(language):
            await _refuse(receive, send, 400, "bad_host", _("Host not allowed."))
        return
    if not _origin_allowed(_header(scope, b"origin")):
        with translation.override(language):
            await _refuse(receive, send, 403, "origin_not_allowed", _("Origin not allowed."))
        return
    if scope["method"] not in ("POST", "DELETE"):
        # Stateless: no stream for the server to send on its own (the spec lets a server answer GET with 405).
        with translation.override(language):
            await _refuse(receive, send, 405, "method_not_allowed", _("Use POST."), [(b"allow", b"POST")])
        return
    try:
        access = await database_sync_to_async(_authorize)(_header(scope, b"authorization"), language)
    except KeyRefused as exc:
        with translation.override(language):
            message, headers = key_refusal(exc)
        await _refuse(receive, send, exc.status, exc.code, message, headers)
        return
    body = await _body(receive)
    streams = scope["method"] == "POST" and wants_progress(body, _header(scope, b"accept"))
    manager = await session_manager(streams)
    scope = {**scope, ACCESS_KEY: access, LANGUAGE_KEY: language, STREAMS_KEY: streams}
    await manager.handle_request(scope, _replay(body, receive), send)


def _origin_allowed(origin: str | None) -> bool:
    """A browser's request (it sends Origin) only from this site's own hosts or MCP_ALLOWED_ORIGINS: a page elsewhere
    must not reach /mcp through the visitor's network (DNS rebinding). Programs send no Origin."""
    if origin is None:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    if origin.rstrip("/").lower() in {allowed.rstrip("/").lower() for allowed in setting("MCP_ALLOWED_ORIGINS")}:
        return True
    return validate_host(parts.hostname, settings.ALLOWED_HOSTS)


def mount_mcp(django_app: Any) -> Any:
    """The HTTP application: /mcp to the MCP server, everything else to Django."""

    async def http(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "http" and scope["path"].rstrip("/") == PATH:
            await mcp_endpoint(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return http

"""The platform as an MCP client: list a server's tools and call one, over streamable HTTP with the `mcp` package.

Outbound safety as for model providers (llm.transports): the URL's host is resolved and checked against every
non-public network (core.netguard) before each connection, and the HTTP client connects to the checked address
(PinnedTransport), so a name re-pointed after the check (DNS rebinding) cannot reach the platform's own network.
A private or loopback server is reached only where the operator allowed it (MCP_ALLOW_PRIVATE_URLS, or the server's
own flag, which only the platform operator can set).

Everything here is async, as the `mcp` client is; the tool loop runs tools in its event loop (agents.tools.mcp),
and the admin's refresh runs on a private event loop (toolservers.services).

Tool calls share one session per server and event loop (`_Held`): opening one (connect, initialise, close) costs
about fifteen times a call on a local server (bench/mcp_overhead.py). A kept session is replaced after
PUBLIC_RECHECK_SECONDS so that the server's name is checked (and pinned) again, as a provider's is; one that broke is
dropped and the next call opens another (a failed call is not retried: the tool may have run).
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
from django.utils.translation import gettext as _
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, PaginatedRequestParams

from core.netguard import UnresolvedHost, check_url
from llm.transports import PUBLIC_RECHECK_SECONDS, PinnedTransport

# Pages of a server's tool list read at most (a server that pages forever is cut off).
MAX_LIST_PAGES = 20
# Sessions kept open per event loop; beyond it the oldest is closed.
MAX_HELD_SESSIONS = 64


class ServerUnavailable(Exception):
    """The server could not be used: refused by the platform, unreachable, too slow, or it broke the protocol. The
    message says which, in the active language."""


@dataclass(frozen=True)
class Connection:
    """What reaching one server takes (from a ToolServer, toolservers.services.connection_for)."""

    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    timeout: float = 20.0
    private_allowed: bool = False
    # The ToolServer row: sessions are kept per server (never shared between tenants' servers).
    server_id: int | None = None

    @property
    def key(self) -> tuple:
        """What a kept session is for: this server, as configured now (a changed token gets a new session)."""
        headers = tuple(sorted(self.headers.items()))
        return (self.server_id, self.url, headers, self.timeout, self.private_allowed)


@dataclass(frozen=True)
class ListedTool:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class CallResult:
    """A tool's answer as text for the model; `is_error`: the tool itself reported a failure."""

    text: str
    is_error: bool


async def _pinned_client(connection: Connection) -> httpx2.AsyncClient:
    """An HTTP client for `connection` that can reach only the address its host was checked at."""
    timeout = httpx2.Timeout(connection.timeout, connect=min(connection.timeout, 10.0))
    if connection.private_allowed:
        return httpx2.AsyncClient(headers=connection.headers, timeout=timeout, trust_env=False)
    try:
        checked = await asyncio.to_thread(check_url, connection.url)
    except UnresolvedHost as exc:
        raise ServerUnavailable(
            _("The host name %(host)s of MCP server “%(name)s” does not resolve.")
            % {"host": exc.host or connection.url, "name": connection.name}
        ) from None
    if checked.private:
        raise ServerUnavailable(
            _(
                "MCP server “%(name)s” is at a private, loopback or link-local address; the platform does not send "
                "tenants' requests there unless the platform operator allows it."
            )
            % {"name": connection.name}
        )
    transport = PinnedTransport({checked.host: (checked.address, time.monotonic())})
    return httpx2.AsyncClient(headers=connection.headers, timeout=timeout, transport=transport, trust_env=False)


@asynccontextmanager
async def open_session(connection: Connection) -> AsyncIterator[ClientSession]:
    """An initialised MCP session with the server (closed on leaving)."""
    client = await _pinned_client(connection)
    async with (
        client,
        streamable_http_client(connection.url, http_client=client) as (read, write),
        ClientSession(read, write) as session,  # calls are bounded by `guarded`
    ):
        await session.initialize()
        yield session


def _reason(exc: BaseException) -> str:
    """The innermost useful words of an error (anyio wraps a transport's errors in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, httpx2.HTTPStatusError):
        return _("the server answered HTTP %(status)s") % {"status": exc.response.status_code}
    return str(exc) or type(exc).__name__


async def guarded(connection: Connection, work: Any) -> Any:
    """Await `work` (a coroutine using the server) within the server's timeout; every failure becomes
    ServerUnavailable with a message naming the server."""
    try:
        async with asyncio.timeout(connection.timeout):  # in this task: no task of its own per call, as wait_for
            return await work
    except ServerUnavailable:
        raise
    except TimeoutError:
        raise ServerUnavailable(
            _("MCP server “%(name)s” did not answer within %(seconds)s seconds.")
            % {"name": connection.name, "seconds": f"{connection.timeout:g}"}
        ) from None
    except (Exception, BaseExceptionGroup) as exc:  # connection refused, HTTP errors, protocol errors
        raise ServerUnavailable(
            _("MCP server “%(name)s” could not be reached: %(reason)s")
            % {"name": connection.name, "reason": _reason(exc)}
        ) from None


async def _list(connection: Connection) -> list[ListedTool]:
    listed: list[ListedTool] = []
    async with open_session(connection) as session:
        cursor = None
        for _page in range(MAX_LIST_PAGES):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed += [ListedTool(t.name, t.description or "", dict(t.input_schema or {})) for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
    return listed


async def list_tools(connection: Connection) -> list[ListedTool]:
    """The tools the server lists (ServerUnavailable when it cannot be asked)."""
    return await guarded(connection, _list(connection))


def result_text(result: Any) -> str:
    """A CallToolResult as one text: its text blocks, else its structured content, else its blocks as JSON."""
    texts = [block.text for block in result.content if getattr(block, "type", "") == "text"]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False, default=str)
    blocks = [block.model_dump(mode="json", exclude_none=True) for block in result.content]
    return json.dumps(blocks, ensure_ascii=False)


class _Held:
    """A session with one server kept open by a task of the event loop (the `mcp` client's context managers must be
    entered and left in one task, so callers borrow `session` and never close it themselves)."""

    def __init__(self, connection: Connection) -> None:
        self.private_allowed = connection.private_allowed
        self.opened_at = time.monotonic()
        self.session: ClientSession | None = None
        self.error: BaseException | None = None
        self._ready = asyncio.Event()
        self._close = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._hold(connection), name="mcp-client-session")

    async def _hold(self, connection: Connection) -> None:
        try:
            async with open_session(connection) as session:
                self.session = session
                self._ready.set()
                await self._close.wait()
        except (Exception, BaseExceptionGroup) as exc:  # reported to the callers waiting for it
            self.error = exc
        finally:
            self.session = None
            self._ready.set()

    async def get(self) -> ClientSession:
        await self._ready.wait()
        if self.session is None:
            raise self.error or ServerUnavailable("closed")
        return self.session

    def usable(self) -> bool:
        fresh = self.private_allowed or time.monotonic() - self.opened_at < PUBLIC_RECHECK_SECONDS
        return fresh and not self._task.done()

    def close(self) -> None:
        self._close.set()


_held: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, _Held]] = weakref.WeakKeyDictionary()


def _held_for(connection: Connection) -> _Held:
    """The kept session of `connection`'s server in this event loop, opened (or replaced) when needed."""
    per_loop = _held.setdefault(asyncio.get_running_loop(), {})
    held = per_loop.get(connection.key)
    if held is None or not held.usable():
        if held is not None:
            held.close()
        held = per_loop[connection.key] = _Held(connection)
        while len(per_loop) > MAX_HELD_SESSIONS:
            per_loop.pop(next(iter(per_loop))).close()
    return held


def _drop(connection: Connection, held: _Held) -> None:
    per_loop = _held.get(asyncio.get_running_loop(), {})
    if per_loop.get(connection.key) is held:
        del per_loop[connection.key]
    held.close()


async def _call(connection: Connection, name: str, arguments: dict[str, Any]) -> CallResult:
    held = _held_for(connection)
    try:
        result = await (await held.get()).call_tool(name, arguments)
    except MCPError as exc:
        if exc.code == CONNECTION_CLOSED:
            _drop(connection, held)
            raise
        return CallResult(text=exc.error.message, is_error=True)  # an error answer (unknown tool...): the tool failed
    except (Exception, BaseExceptionGroup, asyncio.CancelledError):
        # Broken, refused, or a call abandoned at its timeout (which can leave the session's transport closed):
        # the next call opens another session.
        _drop(connection, held)
        raise
    return CallResult(text=result_text(result), is_error=bool(result.is_error))


async def call_tool(connection: Connection, name: str, arguments: dict[str, Any]) -> CallResult:
    """Call the server's tool `name` (ServerUnavailable when the server cannot be used)."""
    return await guarded(connection, _call(connection, name, arguments))

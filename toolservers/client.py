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

Every answer is read within a byte bound of the platform's own (toolservers.bounded), not the `mcp` client's: a tool
list within MCP_LIST_MAX_BYTES (its pages together), each answer of a tool call within MCP_RESULT_MAX_BYTES. A result
over it is cut there and handed on with a note, not failed; a list over it keeps the tools read in full.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
from django.utils.translation import gettext as _
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, PaginatedRequestParams

from core.conf import setting
from core.loopscoped import LoopScoped
from core.netguard import UnresolvedHost, check_url
from llm.transports import PUBLIC_RECHECK_SECONDS, PinnedTransport
from toolservers.bounded import BoundedTransport, Budget, cut_at
from toolservers.reasons import mcp_error_text, reason, tool_error_text

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
class Listing:
    """What a server listed: its tools as read, and whether the list was cut short."""

    tools: list[ListedTool]
    # The list was longer than this many bytes (MCP_LIST_MAX_BYTES): tools past it were not read.
    cut_at_bytes: int | None = None
    # The server had more pages than MAX_LIST_PAGES: the rest were not read.
    pages_left: bool = False


@dataclass(frozen=True)
class CallResult:
    """A tool's answer as text for the model; `is_error`: the tool itself reported a failure."""

    text: str
    is_error: bool


async def _pinned_client(connection: Connection, budget: Budget) -> httpx2.AsyncClient:
    """An HTTP client for `connection` that can reach only the address its host was checked at, and reads answers
    within `budget`."""
    timeout = httpx2.Timeout(connection.timeout, connect=min(connection.timeout, 10.0))
    # Answers uncompressed: the budget bounds what they are, not what they unpack to.
    headers = {name: value for name, value in connection.headers.items() if name.lower() != "accept-encoding"}
    headers["Accept-Encoding"] = "identity"
    if connection.private_allowed:
        transport = BoundedTransport(httpx2.AsyncHTTPTransport(), budget)
        return httpx2.AsyncClient(headers=headers, timeout=timeout, transport=transport, trust_env=False)
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
    pinned = PinnedTransport({checked.host: (checked.address, time.monotonic())})
    transport = BoundedTransport(pinned, budget)
    return httpx2.AsyncClient(headers=headers, timeout=timeout, transport=transport, trust_env=False)


class _Session(ClientSession):
    """The `mcp` client session, but a result cut at the byte bound is not checked against the tool's output schema
    (its structured content, when it has any, is cut too)."""

    async def validate_tool_result(self, name: str, result: CallToolResult) -> None:
        if cut_at(result) is None:
            await super().validate_tool_result(name, result)


@asynccontextmanager
async def open_session(connection: Connection, *, budget: Budget) -> AsyncIterator[ClientSession]:
    """An initialised MCP session with the server, its answers read within `budget` (closed on leaving)."""
    client = await _pinned_client(connection, budget)
    async with (
        client,
        # No SSE event limit of the `mcp` client's: the budget bounds every answer, and cuts rather than fails.
        streamable_http_client(connection.url, http_client=client, max_sse_event_size=None) as (read, write),
        _Session(read, write) as session,  # calls are bounded by `guarded`
    ):
        await session.initialize()
        yield session


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
            % {"name": connection.name, "reason": reason(exc)}
        ) from None


async def _list(connection: Connection) -> Listing:
    listed: list[ListedTool] = []
    budget = Budget(int(setting("MCP_LIST_MAX_BYTES")), shared=True)
    async with open_session(connection, budget=budget) as session:
        cursor = None
        for _page in range(MAX_LIST_PAGES):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed += [ListedTool(t.name, t.description or "", dict(t.input_schema or {})) for t in page.tools]
            if (cut := cut_at(page)) is not None:
                return Listing(listed, cut_at_bytes=cut)
            cursor = page.next_cursor
            if not cursor:
                break
    return Listing(listed, pages_left=bool(cursor))


async def list_tools(connection: Connection) -> Listing:
    """The tools the server lists, as read within MCP_LIST_MAX_BYTES (ServerUnavailable when it cannot be asked)."""
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


def cut_result_text(text: str, cut_bytes: int) -> str:
    """The text of a result cut at `cut_bytes`, with a note saying so, within MCP_TOOL_MAX_CHARS in all (so that the
    tool loop, which cuts to that length, hands it on as it is)."""
    limit = int(setting("MCP_TOOL_MAX_CHARS"))
    words = _(
        "[The result was cut: the server sent more than %(bytes)s bytes; only the first %(shown)s characters are "
        "shown.]"
    )
    shown = min(len(text), limit)
    note = words % {"bytes": cut_bytes, "shown": shown}
    if shown + 1 + len(note) > limit:
        shown = max(0, min(len(text), limit - 1 - len(note)))
        note = words % {"bytes": cut_bytes, "shown": shown}
    return f"{text[:shown]}\n{note}"


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
            budget = Budget(int(setting("MCP_RESULT_MAX_BYTES")))
            async with open_session(connection, budget=budget) as session:
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
            raise self.error or ServerUnavailable(_("The session with the MCP server closed."))
        return self.session

    def usable(self) -> bool:
        fresh = self.private_allowed or time.monotonic() - self.opened_at < PUBLIC_RECHECK_SECONDS
        return fresh and not self._task.done()

    def close(self) -> None:
        self._close.set()


# This event loop's kept sessions, by connection key (a session's task belongs to its loop).
_held: LoopScoped[dict[tuple, _Held]] = LoopScoped(dict)


def _held_for(connection: Connection) -> _Held:
    """The kept session of `connection`'s server in this event loop, opened (or replaced) when needed."""
    per_loop = _held.get()
    held = per_loop.get(connection.key)
    if held is None or not held.usable():
        if held is not None:
            held.close()
        held = per_loop[connection.key] = _Held(connection)
        while len(per_loop) > MAX_HELD_SESSIONS:
            per_loop.pop(next(iter(per_loop))).close()
    return held


def _drop(connection: Connection, held: _Held) -> None:
    per_loop = _held.peek() or {}
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
        return CallResult(text=mcp_error_text(exc), is_error=True)  # an error answer (unknown tool...): the tool failed
    except (Exception, BaseExceptionGroup, asyncio.CancelledError):
        # Broken, refused, or a call abandoned at its timeout (which can leave the session's transport closed):
        # the next call opens another session.
        _drop(connection, held)
        raise
    text = result_text(result)
    if (cut := cut_at(result)) is not None:
        text = cut_result_text(text, cut)
    if result.is_error:
        return CallResult(text=tool_error_text(text), is_error=True)
    return CallResult(text=text, is_error=False)


async def call_tool(connection: Connection, name: str, arguments: dict[str, Any]) -> CallResult:
    """Call the server's tool `name` (ServerUnavailable when the server cannot be used)."""
    return await guarded(connection, _call(connection, name, arguments))

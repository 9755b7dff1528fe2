"""/mcp as the MCP protocol has it, with the `mcp` package's own client against Daphne serving the project: an unknown
tool is JSON-RPC's -32602 naming it, serverInfo carries the platform's version, and a missing, wrong or narrow key
ends in an error whose message says so (a JSON-RPC error body, the one part of a 401/403 the client shows), with the
Bearer challenge of RFC 6750."""

from __future__ import annotations

import asyncio
import tomllib

import httpx2
import pytest
from django.conf import settings as django_settings
from django.core.cache import cache
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types import INVALID_PARAMS
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from api.keys import key_revoke
from api.mcp_server import REFUSED
from api.models import KeyScope
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)

LIST_TOOLS = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
ACCEPT = {"Accept": "application/json, text/event-stream"}


async def _session_do(url: str, headers: dict[str, str], work):
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        initialized = await session.initialize()
        return initialized, await work(session)


def _run(server, headers: dict[str, str], work=None):
    async def nothing(session):
        return None

    return asyncio.run(_session_do(server.url, headers, work or nothing))


def _mcp_error(server, headers: dict[str, str], work=None) -> MCPError:
    """The one MCPError the client raised (inside the task groups' exception groups)."""
    with pytest.raises(BaseExceptionGroup) as raised:
        _run(server, headers, work)
    matched = raised.value.subgroup(MCPError)
    assert matched is not None, raised.value
    leaves = []
    stack = [matched]
    while stack:
        group = stack.pop()
        for exc in group.exceptions:
            (stack if isinstance(exc, BaseExceptionGroup) else leaves).append(exc)
    (error,) = leaves
    return error


def _key(secret: str, language: str = "en") -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}", "Accept-Language": language}


def test_an_unknown_tool_is_a_protocol_error_naming_it(asgi_live_server, published, tenant_admin, make_key):
    _key_row, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])

    def call(name):
        async def work(session):
            return await session.call_tool(name, {"message": "hello"})

        return work

    error = _mcp_error(asgi_live_server, _key(secret), call("no-such-agent"))
    assert error.code == INVALID_PARAMS == -32602
    assert error.message == "No agent “no-such-agent” for this key: list the tools again."
    assert error.data == {"tool": "no-such-agent"}
    # Another tenant's agent is as unknown as one that does not exist; a message missing changes nothing.
    foreign = _mcp_error(asgi_live_server, _key(secret), call(published.foreign.slug))
    assert (foreign.code, foreign.data) == (INVALID_PARAMS, {"tool": published.foreign.slug})

    async def without_message(session):
        return await session.call_tool("no-such-agent", {})

    assert _mcp_error(asgi_live_server, _key(secret), without_message).code == INVALID_PARAMS
    chinese = _mcp_error(asgi_live_server, _key(secret, "zh-hans"), call("no-such-agent"))
    assert chinese.message.startswith("此密钥没有名为") and "no-such-agent" in chinese.message
    # A known tool still answers.
    _init, result = _run(asgi_live_server, _key(secret), call(published.solar.slug))
    assert not result.is_error and result.content[0].text == "You said: hello"


def test_server_info_carries_the_platforms_version(asgi_live_server, published, tenant_admin, make_key):
    with (django_settings.BASE_DIR / "pyproject.toml").open("rb") as project:
        version = tomllib.load(project)["project"]["version"]
    _key_row, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])
    initialized, _nothing = _run(asgi_live_server, _key(secret))
    assert (initialized.server_info.name, initialized.server_info.version) == ("agentplat", version)
    assert version


def test_a_missing_wrong_or_narrow_key_says_so_in_the_python_client(
    asgi_live_server, published, tenant, tenant_admin, make_key
):
    _key_row, chat_only = make_key(tenant_admin, scopes=[KeyScope.CHAT, KeyScope.READ])
    revoked_row, revoked = make_key(tenant_admin, scopes=[KeyScope.MCP])
    with tenant_scope(tenant):
        key_revoke(key=revoked_row)
    cases = [
        ({"Accept-Language": "en"}, "missing_api_key", "Send an API key: Authorization: Bearer <key>.", 401),
        (_key("ak-nope.x"), "invalid_api_key", "This API key is not valid.", 401),
        (_key(chat_only), "insufficient_scope", "This API key does not have the “mcp” scope.", 403),
        (_key(revoked), "revoked_api_key", "This API key was revoked.", 401),
    ]
    for headers, code, reason, status in cases:
        error = _mcp_error(asgi_live_server, headers)
        assert error.code == REFUSED and error.data == {"code": code, "status": status}
        assert error.message == (
            f"{reason} ({code}) Use an API key with the “mcp” scope, made on the API keys page (/api/keys/)."
        )
        assert str(error) == error.message  # what a traceback of the client shows
    chinese = _mcp_error(asgi_live_server, _key("ak-nope.x", "zh-hans"))
    assert chinese.message.startswith("此 API 密钥无效。") and "invalid_api_key" in chinese.message


def test_the_refusals_are_json_rpc_errors_with_the_bearer_challenge(
    asgi_live_server, published, tenant_admin, make_key
):
    _key_row, chat_only = make_key(tenant_admin, scopes=[KeyScope.CHAT])
    url = f"{asgi_live_server.url}/mcp"
    with httpx2.Client(timeout=10) as http:
        missing = http.post(url, json=LIST_TOOLS, headers=ACCEPT)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == 'Bearer realm="agentplat"'  # RFC 6750: no error without a key
        body = missing.json()
        assert (body["jsonrpc"], body["id"], body["error"]["code"]) == ("2.0", 7, REFUSED)
        assert body["error"]["data"] == {"code": "missing_api_key", "status": 401}

        wrong = http.post(url, json=LIST_TOOLS, headers={**ACCEPT, "Authorization": "Bearer ak-nope.x"})
        assert wrong.status_code == 401
        assert wrong.headers["www-authenticate"] == (
            'Bearer realm="agentplat", error="invalid_token", error_description="invalid_api_key"'
        )
        narrow = http.post(url, json=LIST_TOOLS, headers={**ACCEPT, "Authorization": f"Bearer {chat_only}"})
        assert narrow.status_code == 403
        assert narrow.headers["www-authenticate"] == 'Bearer realm="agentplat", error="insufficient_scope", scope="mcp"'
        assert narrow.json()["error"]["data"]["code"] == "insufficient_scope"

        not_json = http.post(url, content=b"not json", headers=ACCEPT)  # no id to answer with: null
        assert not_json.status_code == 401 and not_json.json()["id"] is None
        big = http.post(url, json={**LIST_TOOLS, "params": {"pad": "x" * 100_000}}, headers=ACCEPT)
        assert big.status_code == 401 and big.json()["id"] is None  # read no further than its bound


def test_a_key_over_its_rate_is_told_when_to_retry(asgi_live_server, published, tenant_admin, make_key, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api_key": "1/min"}}
    SimpleRateThrottle.THROTTLE_RATES = api_settings.DEFAULT_THROTTLE_RATES
    try:
        key, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])
        cache.delete(f"throttle_api_key_{key.prefix}")
        headers = {**ACCEPT, "Authorization": f"Bearer {secret}", "Accept-Language": "en"}
        with httpx2.Client(timeout=10) as http:
            assert http.post(f"{asgi_live_server.url}/mcp", json=LIST_TOOLS, headers=headers).status_code == 200
            limited = http.post(f"{asgi_live_server.url}/mcp", json=LIST_TOOLS, headers=headers)
        assert limited.status_code == 429 and 1 <= int(limited.headers["retry-after"]) <= 60
        error = limited.json()["error"]
        assert error["data"] == {"code": "rate_limit_exceeded", "status": 429}
        assert error["message"].startswith("Too many requests with this API key.")
    finally:
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK}
        SimpleRateThrottle.THROTTLE_RATES = {"api_key": "600/min"}

"""The agents served as an MCP server at /mcp, driven by the `mcp` package's own client against Daphne serving the
project, with the scripted model behind the agents."""

from __future__ import annotations

import asyncio
import json

import httpx2
import pytest
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client

from agents.services import agent_publish
from api.models import KeyScope
from memory.models import Conversation, ConversationSource, Message
from tenants.scope import all_tenants, tenant_scope
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db(transaction=True)

MCP_SCOPES = [KeyScope.MCP]


async def _session_do(url: str, secret: str, work, language: str):
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {secret}", "Accept-Language": language}, timeout=30
        ) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return await work(session)


def _run(server, secret, work, language="en"):
    return asyncio.run(_session_do(server.url, secret, work, language))


async def _names(session):
    return [tool.name for tool in (await session.list_tools()).tools]


def _call(name, **arguments):
    async def work(session):
        return await session.call_tool(name, arguments)

    return work


def _stored(conversation_id):
    with all_tenants(reason="test reads what was stored"):
        return list(
            Message.objects.filter(conversation_id=conversation_id).order_by("id").values_list("role", "content")
        )


def test_tools_are_the_keys_published_agents(asgi_live_server, published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin, scopes=MCP_SCOPES)
    tools = _run(asgi_live_server, secret, lambda session: session.list_tools()).tools
    by_name = {tool.name: tool for tool in tools}
    # A Chinese API name is transliterated (it was agent_<id>); the title keeps the agent's name.
    assert set(by_name) == {published.solar.slug, "guang-fu-ce-suan"}
    assert (published.solar.slug, published.pv.slug) == ("solar-advisor", "光伏测算")
    assert by_name["guang-fu-ce-suan"].title == "光伏测算"
    assert by_name[published.solar.slug].title == "Solar advisor"
    assert by_name[published.solar.slug].input_schema["required"] == ["message"]
    _key, narrow = make_key(tenant_admin, scopes=MCP_SCOPES, agents=[published.solar])
    assert _run(asgi_live_server, narrow, _names) == [published.solar.slug]


def test_a_name_a_client_stored_before_still_calls_its_agent(asgi_live_server, published, tenant_admin, make_key):
    """Clients keep tool names (Claude Desktop's allowed tools): agent_<id>, the name of a Chinese-named agent until
    now, still calls it; so does `<name>-<id>`."""
    _key, secret = make_key(tenant_admin, scopes=MCP_SCOPES)
    for name in (f"agent_{published.pv.pk}", f"guang-fu-ce-suan-{published.pv.pk}", "guang-fu-ce-suan"):
        result = _run(asgi_live_server, secret, _call(name, message="多少块板？"))
        assert not result.is_error and result.content[0].text == "You said: 多少块板？"
        with all_tenants(reason="test reads what was stored"):
            conversation = Conversation.objects.get(pk=result.structured_content["conversation_id"])
        assert conversation.agent_id == published.pv.pk


def test_listing_follows_publishing_at_once(asgi_live_server, published, tenant, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin, scopes=MCP_SCOPES)
    assert published.draft.slug not in _run(asgi_live_server, secret, _names)
    with tenant_scope(tenant):
        agent_publish(agent=published.draft, user=None)
    assert published.draft.slug in _run(asgi_live_server, secret, _names)


def test_a_call_answers_and_the_conversation_continues(asgi_live_server, published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin, scopes=MCP_SCOPES)
    first = _run(asgi_live_server, secret, _call(published.solar.slug, message="My roof faces south."))
    assert not first.is_error
    assert first.content[0].text == "You said: My roof faces south."
    conversation_id = first.structured_content["conversation_id"]
    assert json.loads(first.content[1].text) == {"conversation_id": conversation_id}
    again = _call(published.solar.slug, message="How many panels?", conversation_id=conversation_id)
    second = _run(asgi_live_server, secret, again)
    assert second.structured_content == {"reply": "You said: How many panels?", "conversation_id": conversation_id}
    assert _stored(conversation_id) == [
        ("user", "My roof faces south."),
        ("assistant", "You said: My roof faces south."),
        ("user", "How many panels?"),
        ("assistant", "You said: How many panels?"),
    ]
    with all_tenants(reason="test reads what was stored"):  # the finding: MCP's were recorded as the chat page's
        assert Conversation.objects.get(pk=conversation_id).source == ConversationSource.MCP


def test_another_tenants_key_sees_nothing_of_this_tenant(
    asgi_live_server, published, tenant_admin, other_tenant, make_key
):
    _key, secret = make_key(tenant_admin, scopes=MCP_SCOPES)
    mine = _run(asgi_live_server, secret, _call(published.solar.slug, message="secret plan"))
    conversation_id = mine.structured_content["conversation_id"]
    with tenant_scope(other_tenant):
        stranger = MembershipFactory(tenant=other_tenant).user
    _key, foreign = make_key(stranger, owner=other_tenant, scopes=MCP_SCOPES)
    assert _run(asgi_live_server, foreign, _names) == [published.foreign.slug]
    with pytest.raises(BaseExceptionGroup) as refused:  # an unknown tool: JSON-RPC -32602 (test_mcp_protocol)
        _run(asgi_live_server, foreign, _call(published.solar.slug, message="hello"))
    assert "No agent" in repr(refused.value.subgroup(MCPError))
    stolen = _run(
        asgi_live_server, foreign, _call(published.foreign.slug, message="read it", conversation_id=conversation_id)
    )
    assert stolen.is_error and stolen.content[0].text == "No such conversation of this agent."
    steal = _call(published.foreign.slug, message="读", conversation_id=conversation_id)
    chinese = _run(asgi_live_server, foreign, steal, language="zh-hans")
    assert chinese.content[0].text == "该智能体没有这个会话。"
    assert len(_stored(conversation_id)) == 2  # nothing was added to the first tenant's conversation


def test_a_key_without_the_mcp_scope_or_without_a_key_is_refused(asgi_live_server, published, tenant_admin, make_key):
    _key, chat_only = make_key(tenant_admin, scopes=[KeyScope.CHAT, KeyScope.READ])
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    with httpx2.Client(timeout=10) as http:
        response = http.post(f"{asgi_live_server.url}/mcp", json=body, headers=headers)
        assert response.status_code == 401 and response.json()["error"]["data"]["code"] == "missing_api_key"
        assert response.headers["www-authenticate"].startswith("Bearer")
        response = http.post(
            f"{asgi_live_server.url}/mcp", json=body, headers={**headers, "Authorization": f"Bearer {chat_only}"}
        )
        assert response.status_code == 403 and response.json()["error"]["data"]["code"] == "insufficient_scope"
        response = http.post(
            f"{asgi_live_server.url}/mcp", json=body, headers={**headers, "Authorization": "Bearer ak-nope.x"}
        )
        assert response.status_code == 401


def test_finding_get_mcp_holds_no_stream_and_a_foreign_origin_is_refused(
    asgi_live_server, published, tenant_admin, make_key, settings
):
    """The probe held 500 `GET /mcp` streams open with a valid key, none counted; and any Origin was accepted."""
    _key, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])
    auth = {"Authorization": f"Bearer {secret}", "Accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    url = f"{asgi_live_server.url}/mcp"
    with httpx2.Client(timeout=10) as http:
        held = http.get(url, headers={**auth, "Accept": "text/event-stream"})
        assert held.status_code == 405 and held.headers["allow"] == "POST"
        foreign = http.post(url, json=body, headers={**auth, "Origin": "https://evil.example"})
        assert foreign.status_code == 403 and foreign.json()["error"]["data"]["code"] == "origin_not_allowed"
        own = http.post(url, json=body, headers={**auth, "Origin": "http://127.0.0.1:9"})  # this site's own host
        assert own.status_code == 200 and own.json()["result"]["tools"]
        settings.MCP_ALLOWED_ORIGINS = ["https://ide.example"]
        allowed = http.post(url, json=body, headers={**auth, "Origin": "https://ide.example"})
        assert allowed.status_code == 200
        programs = http.post(url, json=body, headers=auth)  # no Origin: a program, not a page
        assert programs.status_code == 200

"""The platform as an MCP client, against a real MCP server (the `mcp` package's, on 127.0.0.1): listing and
enabling tools, calling them through invoke_tool (success, failure, timeout, large result), the private-address
guard, and one tenant's servers invisible to another."""

from __future__ import annotations

import asyncio

import pytest

from agents.tools import ToolCallContext, find_tool, tool_refusal, tools_available, tools_for
from agents.tools.invoke import invoke_tool
from agents.tools.mcp import McpTool
from tenants.scope import tenant_scope
from tests.mcp_servers import hostile_tool
from toolservers.client import Connection, ServerUnavailable, list_tools
from toolservers.models import ServerTool, ToolServer
from toolservers.services import tools_refresh

pytestmark = pytest.mark.django_db

WEATHER = "mcp__tt__weather"


def _invoke(tenant, name, arguments):
    with tenant_scope(tenant):
        tool = find_tool(name, tenant=tenant)
    return asyncio.run(invoke_tool(tool, name=name, arguments=arguments, call=ToolCallContext(tenant=tenant)))


def test_refresh_lists_the_servers_tools_disabled_and_keeps_choices(tenant, make_server):
    server = make_server(tenant, enable=())
    with tenant_scope(tenant):
        rows = {tool.name: tool for tool in ServerTool.objects.filter(server=server)}
        assert set(rows) == {"weather", "add", "fail", "slow", "big"}
        assert not any(tool.enabled for tool in rows.values())
        assert rows["add"].function_name == "mcp__tt__add" and rows["add"].description == "Add two numbers."
        assert rows["add"].input_schema["required"] == ["a", "b"]
        rows["add"].enabled = True
        rows["add"].save()
        tools_refresh(server)  # again: the administrator's choice stays
        assert list(ServerTool.objects.filter(enabled=True).values_list("name", flat=True)) == ["add"]
        server.refresh_from_db()
        assert server.refreshed_at is not None and server.last_error == ""
        # Headers are stored encrypted, never in clear.
        assert "s3cret-token" not in server.headers_encrypted
        assert server.headers() == {"Authorization": "Bearer s3cret-token"}


def test_only_enabled_tools_are_offered_with_their_schema(tenant, make_server):
    make_server(tenant, enable=("weather", "add"))
    with tenant_scope(tenant):
        offered = {tool.name: tool for tool in tools_available(tenant) if isinstance(tool, McpTool)}
        assert set(offered) == {WEATHER, "mcp__tt__add"}
        assert offered[WEATHER].group == "Test tools" and offered[WEATHER].label() == "Test tools › weather"
        assert offered["mcp__tt__add"].openai_schema()["function"]["parameters"]["required"] == ["a", "b"]
        assert [tool.name for tool in tools_for(["mcp__tt__add", "http_request", "mcp__tt__fail"], tenant=tenant)] == [
            "mcp__tt__add",
            "http_request",
        ]
        assert tool_refusal("mcp__tt__fail", tenant=tenant) is not None  # listed, not enabled


def test_a_tool_call_succeeds(tenant, make_server):
    make_server(tenant, enable=("add", "weather"))
    outcome = _invoke(tenant, "mcp__tt__add", {"a": 2, "b": 40})
    assert outcome.ok and outcome.text == "42"
    outcome = _invoke(tenant, WEATHER, {"city": "上海"})
    assert outcome.ok and outcome.text == "Sunny in 上海, 21 °C"


def test_invalid_arguments_are_refused_before_the_server_is_called(tenant, make_server):
    make_server(tenant, enable=("add",))
    outcome = _invoke(tenant, "mcp__tt__add", {"a": "two"})
    assert not outcome.ok and "invalid arguments for mcp__tt__add" in outcome.text
    assert "'b' is a required" in outcome.text


def test_a_failing_tool_becomes_a_result_the_model_reads(tenant, make_server):
    make_server(tenant, enable=("fail",))
    outcome = _invoke(tenant, "mcp__tt__fail", {"reason": "no"})
    assert not outcome.ok
    assert outcome.text.startswith("Error: fail reported an error:") and "fail" in outcome.error


def test_a_slow_tool_times_out_with_a_readable_error(tenant, make_server):
    make_server(tenant, enable=("slow",), timeout_seconds=0.5)
    outcome = _invoke(tenant, "mcp__tt__slow", {"seconds": 5})
    assert not outcome.ok
    assert outcome.error == "MCP server “Test tools” did not answer within 0.5 seconds."


def test_the_agents_tool_timeout_bounds_a_slow_server_too(tenant, make_server, settings):
    settings.AGENT_TOOL_TIMEOUT = 0.5
    make_server(tenant, enable=("slow",), timeout_seconds=30)
    outcome = _invoke(tenant, "mcp__tt__slow", {"seconds": 5})
    assert not outcome.ok and "did not answer within 0.5 seconds" in outcome.error


def test_a_large_result_is_cut_with_a_note(tenant, make_server, settings):
    settings.MCP_TOOL_MAX_CHARS = 1000
    make_server(tenant, enable=("big",))
    outcome = _invoke(tenant, "mcp__tt__big", {"size": 50_000})
    assert outcome.ok
    assert outcome.text.startswith("x" * 1000 + "\n[The result was cut: it had 50000 characters")
    assert len(outcome.text) < 1200


def test_an_unreachable_server_is_a_clear_error(tenant, make_server, mcp_test_server):
    server = make_server(tenant, enable=("weather",))
    with tenant_scope(tenant):
        ToolServer.objects.filter(pk=server.pk).update(url="http://127.0.0.1:9/mcp")  # nothing listens there
    outcome = _invoke(tenant, WEATHER, {"city": "Paris"})
    assert not outcome.ok and outcome.error.startswith("MCP server “Test tools” could not be reached:")
    with tenant_scope(tenant), pytest.raises(ServerUnavailable, match="could not be reached"):
        tools_refresh(ToolServer.objects.get(pk=server.pk))
    with tenant_scope(tenant):
        assert "could not be reached" in ToolServer.objects.get(pk=server.pk).last_error


def test_the_error_is_in_chinese_for_a_chinese_caller(tenant, make_server):
    from django.utils import translation

    make_server(tenant, enable=("slow",), timeout_seconds=0.3)
    with translation.override("zh-hans"):
        outcome = _invoke(tenant, "mcp__tt__slow", {"seconds": 3})
    assert "MCP 服务器" in outcome.error


def test_a_loopback_server_is_refused_unless_the_operator_allows_it(tenant, mcp_test_server, settings):
    settings.MCP_ALLOW_PRIVATE_URLS = False
    connection = Connection(name="Local", url=mcp_test_server.url)
    with pytest.raises(ServerUnavailable, match="private, loopback or link-local"):
        asyncio.run(list_tools(connection))
    allowed = Connection(name="Local", url=mcp_test_server.url, private_allowed=True)
    assert "weather" in [tool.name for tool in asyncio.run(list_tools(allowed)).tools]


def test_a_loopback_server_saved_earlier_is_refused_at_call_time(tenant, make_server, settings):
    make_server(tenant, enable=("weather",))
    settings.MCP_ALLOW_PRIVATE_URLS = False  # the operator withdrew the permission
    outcome = _invoke(tenant, WEATHER, {"city": "Paris"})
    assert not outcome.ok and "private, loopback or link-local" in outcome.error


def test_another_tenants_tools_are_invisible_and_refused(tenant, other_tenant, make_server):
    make_server(other_tenant, enable=("weather", "add"))
    with tenant_scope(tenant):
        assert not [tool for tool in tools_available(tenant) if isinstance(tool, McpTool)]
        assert find_tool(WEATHER, tenant=tenant) is None
        assert tools_for([WEATHER], tenant=tenant) == []
        assert tool_refusal(WEATHER, tenant=tenant) == f"No tool named “{WEATHER}” is registered."
        assert not ServerTool.objects.exists() and not ToolServer.objects.exists()
    outcome = _invoke(tenant, WEATHER, {"city": "Paris"})
    assert not outcome.ok and "is not available to this agent" in outcome.error


def test_calls_share_one_session_per_server_and_survive_a_timeout(tenant, make_server):
    from toolservers import client

    make_server(tenant, enable=("add", "slow"), timeout_seconds=0.5)
    with tenant_scope(tenant):
        add, slow = find_tool("mcp__tt__add", tenant=tenant), find_tool("mcp__tt__slow", tenant=tenant)
    call = ToolCallContext(tenant=tenant)

    async def calls():
        first = await invoke_tool(add, name=add.name, arguments={"a": 1, "b": 1}, call=call)
        timed_out = await invoke_tool(slow, name=slow.name, arguments={"seconds": 3}, call=call)
        after = await asyncio.gather(
            *(invoke_tool(add, name=add.name, arguments={"a": n, "b": 1}, call=call) for n in range(5))
        )
        return first, timed_out, after, dict(client._held.get())

    first, timed_out, after, held = asyncio.run(calls())
    assert first.text == "2" and "did not answer within 0.5 seconds" in timed_out.error
    assert [outcome.text for outcome in after] == ["1", "2", "3", "4", "5"]
    assert len(held) == 1  # one session of this server, reused by every call


def _nested(levels: int) -> dict:
    """An input schema with objects nested `levels` deep (two levels of JSON each)."""
    schema: dict = {"type": "string"}
    for _level in range(levels):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


def test_finding_tool_list_bounded_in_bytes_count_names_descriptions_and_schemas(
    tenant, make_server, hostile_json_server, settings
):
    settings.MCP_LIST_MAX_TOOLS = 40
    wide = {f"p{n}": {"type": "string", "description": "x" * 100} for n in range(600)}  # about 70 kB
    hostile_json_server.tools = [
        hostile_tool("long_description", "d" * 20_000),
        hostile_tool("large_schema", schema={"type": "object", "properties": wide}),
        hostile_tool("deep_schema", schema=_nested(20)),
        *(hostile_tool(f"t{n:03}", "A tool.") for n in range(60)),
    ]
    server = make_server(tenant, enable=(), url=hostile_json_server.url)
    with tenant_scope(tenant):
        rows = {tool.name: tool for tool in ServerTool.objects.filter(server=server)}
        report = ToolServer.objects.get(pk=server.pk).last_error
    assert len(rows) == 40 and "large_schema" not in rows and "deep_schema" not in rows
    assert len(rows["long_description"].description) == 8000  # MCP_TOOL_DESCRIPTION_MAX_CHARS
    assert "1 dropped, their input schemas longer than 50000 bytes: “large_schema”." in report
    assert "1 dropped, their input schemas nested deeper than 32 levels: “deep_schema”." in report
    assert "21 dropped, beyond the 40 tools a server may have: “t039”, “t040”," in report
    assert "1 kept with their descriptions shortened to 8000 characters: “long_description”." in report

    # A list longer than MCP_LIST_MAX_BYTES is read no further: the tools read in full before it are kept.
    hostile_json_server.tools = [hostile_tool("first"), hostile_tool("huge", "h" * 3_000_000), hostile_tool("after")]
    with tenant_scope(tenant):
        kept = tools_refresh(ToolServer.objects.get(pk=server.pk))
        report = ToolServer.objects.get(pk=server.pk).last_error
        assert list(ServerTool.objects.filter(server=server).values_list("name", flat=True)) == ["first"]
    assert [tool.name for tool in kept] == ["first"]
    assert "longer than 2000000 bytes and was read no further; the tools read in full are kept (1)." in report


@pytest.mark.parametrize("answer", ["sse", "json"])
def test_finding_result_over_one_mib_is_cut_to_mcp_tool_max_chars_not_failed(
    tenant, make_server, hostile_server, hostile_json_server, answer
):
    hostile = hostile_server if answer == "sse" else hostile_json_server
    hostile.tools = [hostile_tool("huge", "A long answer.")]
    hostile.result_text = "字x" * 1_500_000  # 3,000,000 characters, 6 MB as text and structured content
    make_server(tenant, enable=("huge",), url=hostile.url)
    outcome = _invoke(tenant, "mcp__tt__huge", {})
    assert outcome.ok, outcome.error
    assert len(outcome.text) <= 20_000  # MCP_TOOL_MAX_CHARS
    assert outcome.text.startswith("字x" * 9_000)
    assert outcome.text.endswith(
        "\n[The result was cut: the server sent more than 1000000 bytes; only the first 19894 characters are shown.]"
    )

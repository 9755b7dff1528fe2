"""Issue 36: an MCP server's or tool's failure reads in the reader's language. The `mcp` client's, httpx's and
anyio's English ("All connection attempts failed", "Server returned an error response", "Connection closed") and an
MCPServer tool's "Error executing tool" are said as a translated sentence, the library's words after it as technical
detail in backticks (pages show them as code); the real `mcp` client against real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.urls import reverse
from django.utils import translation
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from agents.tools import ToolCallContext, ToolResult, find_tool, python_tool
from agents.tools.invoke import invoke_tool
from core.errortext import error_html, with_detail
from tenants.scope import tenant_scope
from toolservers.client import Connection, ServerUnavailable, list_tools
from toolservers.models import ToolServer
from toolservers.reasons import reason, tool_error_text

pytestmark = pytest.mark.django_db

# A Latin word outside the backticked detail: what a Chinese reader must not meet (names of servers and tools
# aside, which the caller removes).
LATIN = re.compile(r"[A-Za-z]{2,}")


def _outside_detail(text: str, *names: str) -> list[str]:
    text = re.sub(r"`[^`]*`", " ", text)
    for name in ("MCP", "URL", "HTTP", *names):
        text = text.replace(name, " ")
    return LATIN.findall(text)


def _invoke(tenant, name, arguments, language):
    with tenant_scope(tenant):
        tool = find_tool(name, tenant=tenant)

    async def call():
        with translation.override(language):
            return await invoke_tool(tool, name=name, arguments=arguments, call=ToolCallContext(tenant=tenant))

    return asyncio.run(call())


class _Failing(BaseHTTPRequestHandler):
    """An HTTP server at the MCP URL that answers every request 500 (the `mcp` client: "Server returned an error
    response")."""

    def do_POST(self):
        self.send_response(500)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"boom")

    do_GET = do_DELETE = do_POST

    def log_message(self, *args):
        return


@pytest.fixture
def failing_http():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    server.shutdown()


def test_a_detail_goes_after_the_sentence_and_shows_as_code():
    assert with_detail("连接失败。", "All connection attempts failed") == "连接失败。 `All connection attempts failed`"
    assert with_detail("连接失败。", "") == "连接失败。"
    assert with_detail("It says `x`.", "a `b` c") == "It says `x`. `a 'b' c`"
    html = error_html("无法连接 <b>。 `All connection attempts failed`")
    assert html == "无法连接 &lt;b&gt;。 <code>All connection attempts failed</code>"


@pytest.mark.parametrize("language", ["zh-hans", "en"])
def test_known_errors_of_the_mcp_client_are_said_in_the_readers_language(language):
    closed = MCPError(code=CONNECTION_CLOSED, message="Connection closed")
    refused = ConnectionRefusedError("All connection attempts failed")
    with translation.override(language):
        texts = {
            "closed": reason(closed),
            "grouped": reason(BaseExceptionGroup("unhandled errors in a TaskGroup", [refused])),
            "raised": tool_error_text("Error executing tool fail: cannot do it: no"),
            "unknown": reason(ZeroDivisionError("division by zero")),
        }
    assert texts["closed"].endswith(" `Connection closed`")
    assert texts["grouped"].endswith(" `All connection attempts failed`")
    assert texts["raised"].endswith(" `cannot do it: no`")
    assert texts["unknown"].endswith(" `ZeroDivisionError: division by zero`")
    if language == "en":
        assert texts["closed"].startswith("the server closed the connection.")
        assert texts["grouped"].startswith("the connection failed: check the URL and that the server is running.")
        assert texts["raised"].startswith("the tool raised an error.")
    else:
        assert texts["closed"].startswith("服务器关闭了连接。")
        assert texts["grouped"].startswith("连接失败：请检查 URL 以及服务器是否在运行。")
        assert texts["raised"].startswith("工具执行时出错。")
        for text in texts.values():
            assert _outside_detail(text) == [], text
    # A tool's own error answer that is not an MCPServer's "Error executing tool" stays the tool's words.
    assert tool_error_text("the kitchen is closed") == "the kitchen is closed"


def test_a_server_down_is_said_in_chinese_with_the_detail_after(tenant, make_server):
    server = make_server(tenant, enable=("weather",))
    with tenant_scope(tenant):
        ToolServer.objects.filter(pk=server.pk).update(url="http://127.0.0.1:9/mcp")  # nothing listens there
    outcome = _invoke(tenant, "mcp__tt__weather", {"city": "Paris"}, "zh-hans")
    assert not outcome.ok
    assert outcome.error.startswith("无法连接 MCP 服务器“Test tools”：连接失败：请检查 URL 以及服务器是否在运行。 `")
    assert outcome.text == f"错误：{outcome.error}"  # what the model reads, in the conversation's language
    assert _outside_detail(outcome.text, "Test tools") == []
    english = _invoke(tenant, "mcp__tt__weather", {"city": "Paris"}, "en")
    assert english.text.startswith(
        "Error: MCP server “Test tools” could not be reached: the connection failed: check the URL and that the "
        "server is running. `"
    )


def test_a_tool_that_raises_is_said_in_chinese_with_its_error_after(tenant, make_server):
    make_server(tenant, enable=("fail",))
    outcome = _invoke(tenant, "mcp__tt__fail", {"reason": "no"}, "zh-hans")
    assert not outcome.ok
    # The server hides what an unexpected error said (MCPServer answers only "Error executing tool fail").
    assert outcome.error == "fail 报告了错误：工具执行时出错。"
    assert "Error executing tool" not in outcome.text and outcome.text.startswith("错误：")


def test_a_server_answering_500_is_said_in_chinese(tenant, failing_http, allow_private):
    connection = Connection(name="Broken", url=failing_http, timeout=5, private_allowed=True)
    with translation.override("zh-hans"), pytest.raises(ServerUnavailable) as refused:
        asyncio.run(list_tools(connection))
    text = str(refused.value)
    assert text.startswith("无法连接 MCP 服务器“Broken”：")
    assert "Server returned an error response" not in re.sub(r"`[^`]*`", "", text)
    assert _outside_detail(text, "Broken") == []


def test_the_admin_shows_the_last_error_with_its_detail_as_code(login, tenant_admin, tenant, make_server):
    server = make_server(tenant, enable=("weather",))
    with tenant_scope(tenant):
        ToolServer.objects.filter(pk=server.pk).update(url="http://127.0.0.1:9/mcp")
    client = login(tenant_admin, tenant)
    changelist = reverse("admin:toolservers_toolserver_changelist")
    response = client.post(
        changelist,
        {"action": "refresh_tools", "_selected_action": [server.pk]},
        follow=True,
        HTTP_ACCEPT_LANGUAGE="zh-hans",
    )
    page = response.content.decode()
    assert "无法连接 MCP 服务器“Test tools”：连接失败：请检查 URL 以及服务器是否在运行。 <code>" in page
    change_page = reverse("admin:toolservers_toolserver_change", args=[server.pk])
    change = client.get(change_page, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "连接失败：请检查 URL 以及服务器是否在运行。 <code>" in change.content.decode()


def test_a_short_cell_drops_the_detail_before_cutting_the_sentence():
    text = "步骤“`weather`”失败：无法连接。 `All connection attempts failed`"
    whole = "步骤“<code>weather</code>”失败：无法连接。 <code>All connection attempts failed</code>"
    assert error_html(text, 200) == whole
    assert error_html(text, 30) == "步骤“<code>weather</code>”失败：无法连接。"  # identifiers stay
    assert error_html("x" * 50, 10) == "x" * 9 + "…"
    assert error_html("abc `def` " + "y" * 20, 7) == "abc …"  # never half a detail


@python_tool(
    name="ew_boom",
    description_en="A tool that breaks.",
    label_en="Breaker",
    label_zh="故障工具",
    parameters={"type": "object", "properties": {}},
)
def ew_boom() -> ToolResult:
    raise RuntimeError("internal state lost")


@pytest.mark.parametrize(("language", "error"), [("zh-hans", "“故障工具”执行失败。"), ("en", "Breaker failed.")])
def test_a_python_tool_that_raises_is_said_by_its_label(tenant, language, error):
    async def call():
        with translation.override(language):
            return await invoke_tool(find_tool("ew_boom", tenant=tenant), name="ew_boom", arguments={},
                                     call=ToolCallContext(tenant=tenant))  # fmt: skip

    outcome = asyncio.run(call())
    assert not outcome.ok and outcome.error == error  # the exception's words go to the log only
    assert "internal state lost" not in outcome.text

"""The MCP servers' admin: a tenant admin adds a server (token write-only), its tools are listed, enabled one by one
and refreshed on demand; an unreachable or private server is explained; another tenant's server is not reachable."""

from __future__ import annotations

import pytest

from tenants.scope import tenant_scope
from tests.mcp_servers import hostile_tool
from toolservers.models import ServerTool, ToolServer

pytestmark = pytest.mark.django_db

ADD = "/admin/toolservers/toolserver/add/"
LIST = "/admin/toolservers/toolserver/"
EN = {"HTTP_ACCEPT_LANGUAGE": "en"}


def _form(url: str, **extra) -> dict:
    return {
        "name": "Weather tools", "slug": "wx", "url": url, "timeout_seconds": "5", "bearer_token": "tok-123",
        "extra_headers": "", "tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": "0", **extra,
    }  # fmt: skip


def test_a_tenant_admin_adds_a_server_and_enables_a_tool(tenant, tenant_admin, client, mcp_test_server, allow_private):
    client.force_login(tenant_admin)
    response = client.post(ADD, _form(mcp_test_server.url), follow=True, **EN)
    assert response.status_code == 200
    assert "Weather tools lists 5 tools; enable those agents may use." in response.content.decode()
    with tenant_scope(tenant):
        server = ToolServer.objects.get()
        assert server.tenant == tenant and server.headers() == {"Authorization": "Bearer tok-123"}
        weather = ServerTool.objects.get(name="weather")
    page = client.get(f"{LIST}{server.pk}/change/", **EN).content.decode()
    assert "tok-123" not in page and "mcp__wx__weather" in page
    with tenant_scope(tenant):
        rows = list(ServerTool.objects.filter(server=server).order_by("name").values_list("pk", "name"))
    data = _form(mcp_test_server.url, bearer_token="")
    data.update({"tools-TOTAL_FORMS": str(len(rows)), "tools-INITIAL_FORMS": str(len(rows))})
    for index, (pk, name) in enumerate(rows):
        data[f"tools-{index}-id"] = str(pk)
        data[f"tools-{index}-server"] = str(server.pk)
        if name == "weather":
            data[f"tools-{index}-enabled"] = "on"
    response = client.post(f"{LIST}{server.pk}/change/", data, **EN)
    assert response.status_code == 302, response.content.decode()[:2000]
    with tenant_scope(tenant):
        weather.refresh_from_db()
        assert weather.enabled and not ServerTool.objects.filter(enabled=True).exclude(pk=weather.pk).exists()
        assert ToolServer.objects.get().headers() == {"Authorization": "Bearer tok-123"}  # empty token: kept


def test_refresh_on_demand_and_a_clear_error_for_an_unreachable_server(tenant, tenant_admin, client, make_server):
    server = make_server(tenant, enable=())
    client.force_login(tenant_admin)
    data = {"action": "refresh_tools", "_selected_action": [server.pk]}
    response = client.post(LIST, data, follow=True, **EN)
    assert "Test tools lists 5 tools" in response.content.decode()
    with tenant_scope(tenant):
        ToolServer.objects.filter(pk=server.pk).update(url="http://127.0.0.1:9/mcp")
    response = client.post(LIST, data, follow=True, **EN)
    assert "MCP server “Test tools” could not be reached:" in response.content.decode()
    response = client.post(LIST, data, follow=True, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "无法连接 MCP 服务器“Test tools”" in response.content.decode()


def test_a_private_url_is_refused_when_not_allowed(tenant, tenant_admin, client, mcp_test_server, settings):
    settings.MCP_ALLOW_PRIVATE_URLS = False
    client.force_login(tenant_admin)
    response = client.post(ADD, _form(mcp_test_server.url), **EN)
    assert response.status_code == 200 and "private, loopback or link-local address" in response.content.decode()
    with tenant_scope(tenant):
        assert not ToolServer.objects.exists()
    # A tenant admin cannot grant itself the platform's network.
    response = client.post(ADD, _form(mcp_test_server.url, private_network_allowed="on"), **EN)
    assert "private, loopback or link-local address" in response.content.decode()


def test_another_tenants_server_is_not_reachable_in_the_admin(tenant, other_tenant, tenant_admin, client, make_server):
    foreign = make_server(other_tenant, enable=("weather",), name="Foreign tools")
    client.force_login(tenant_admin)
    listing = client.get(LIST, **EN).content.decode()
    assert "Foreign tools" not in listing
    for action in ("change", "delete", "history"):
        assert client.get(f"{LIST}{foreign.pk}/{action}/", **EN).status_code in (302, 404)
    client.post(LIST, {"action": "refresh_tools", "_selected_action": [foreign.pk]}, **EN)
    with tenant_scope(other_tenant):
        assert ToolServer.objects.get(pk=foreign.pk).last_error == ""


def test_finding_long_tool_name_or_nul_does_not_500_on_the_admin_save(
    tenant, tenant_admin, client, hostile_server, allow_private
):
    same_start = "same_" + "s" * 70  # past the 64 characters of a name for models: two tools would share one
    hostile_server.tools = [
        hostile_tool("ok", "A good tool."),
        hostile_tool("n" * 300),
        hostile_tool("nul\x00name"),
        hostile_tool("nul_description", "before\x00after"),
        hostile_tool("nul_schema", schema={"type": "object", "properties": {"a\x00": {"type": "string"}}}),
        hostile_tool(f"{same_start}_1"),
        hostile_tool(f"{same_start}_2"),
        hostile_tool("ok", "Listed twice."),
    ]
    client.force_login(tenant_admin)
    response = client.post(ADD, _form(hostile_server.url), follow=True, **EN)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Weather tools lists 3 tools; enable those agents may use." in page
    with tenant_scope(tenant):
        server = ToolServer.objects.get()
        rows = {tool.name: tool for tool in ServerTool.objects.filter(server=server)}
    assert set(rows) == {"ok", "nul_description", f"{same_start}_1"}
    assert rows["nul_description"].description == "beforeafter" and rows["ok"].description == "A good tool."
    expected = [
        f"1 dropped, their names longer than 128 characters: “{'n' * 40}…”.",
        "1 dropped, their names not only letters, digits, _, - and .: “nul\\x00name”.",
        "1 dropped, listed twice: “ok”.",
        "1 dropped, NUL characters in their input schemas: “nul_schema”.",
        "1 dropped, their names for models (64 characters at most) the same as another tool's: “same_sssss",
        "1 kept with NUL characters removed from their descriptions: “nul_description”.",
    ]
    for words in expected:
        assert words in server.last_error
    change = client.get(f"{LIST}{server.pk}/change/", **EN)
    assert change.status_code == 200 and "NUL characters in their input schemas" in change.content.decode()

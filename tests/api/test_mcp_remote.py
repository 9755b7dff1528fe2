"""A missing, wrong or narrow key, as Claude Desktop shows it: through its bridge `mcp-remote` (the real npm
package, pinned in scripts/mcp-conformance), which answers a 401 with OAuth. The platform takes keys, not OAuth, and
what the bridge finds says so (api.mcp_oauth): it ends with the key's refusal, in the language asked for, not with
"Dynamic Client Registration rejected (HTTP 404)" and a fall-back to the old SSE transport. The same paths, read
directly, are tested below."""

from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest

from api.keys import key_revoke
from api.models import KeyScope
from tenants.scope import tenant_scope
from tests.api import mcp_node
from tests.api.mcp_node import MCP_REMOTE

pytestmark = pytest.mark.django_db(transaction=True)

node = mcp_node.node  # the fixture
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "claude-ai", "version": "0.1.0"}}}  # fmt: skip
EN = {"Accept-Language": "en"}


def _bridge(node: str, url: str, tmp_path, headers: dict[str, str]) -> subprocess.Popen:
    """mcp-remote as Claude Desktop starts it (`npx mcp-remote <url> --header …`), its OAuth state in tmp_path."""
    arguments = [node, str(MCP_REMOTE), f"{url}/mcp", "--allow-http"]
    for name, value in headers.items():
        arguments += ["--header", f"{name}: {value}"]
    env = {**os.environ, "MCP_REMOTE_CONFIG_DIR": str(tmp_path), "BROWSER": "true"}
    return subprocess.Popen(arguments, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)  # fmt: skip


def _refused(node: str, url: str, tmp_path, headers: dict[str, str]) -> str:
    """What the bridge logs (Claude Desktop's log of the server) when it gives up; it must give up by itself."""
    bridge = _bridge(node, url, tmp_path, headers)
    try:
        _out, err = bridge.communicate(json.dumps(INITIALIZE) + "\n", timeout=60)
    finally:
        bridge.kill()
    assert bridge.returncode != 0, err
    assert "HTTP 404" not in err and "SSE error" not in err, err  # the old dead end
    return err


def test_a_missing_wrong_or_narrow_key_is_what_mcp_remote_reports(
    node, asgi_live_server, published, tenant, tenant_admin, make_key, tmp_path
):
    _row, chat_only = make_key(tenant_admin, scopes=[KeyScope.CHAT])
    revoked_row, revoked = make_key(tenant_admin, scopes=[KeyScope.MCP])
    with tenant_scope(tenant):
        key_revoke(key=revoked_row)
    url = asgi_live_server.url
    cases = [
        ({**EN, "Authorization": "Bearer ak-nope.x"}, "This API key is not valid. (invalid_api_key)"),
        (EN, "Send an API key: Authorization: Bearer <key>. (missing_api_key)"),
        ({**EN, "Authorization": f"Bearer {revoked}"}, "This API key was revoked. (revoked_api_key)"),
        ({**EN, "Authorization": f"Bearer {chat_only}"}, "does not have the “mcp” scope. (insufficient_scope)"),
    ]
    for number, (headers, said) in enumerate(cases):
        err = _refused(node, url, tmp_path / str(number), headers)
        assert said in err and "Use an API key with the “mcp” scope, made on the API keys page (/api/keys/)." in err
        assert "Fatal error" in err
    chinese = _refused(node, url, tmp_path / "zh", {"Authorization": "Bearer ak-nope.x"})  # the site's default
    assert "此 API 密钥无效。" in chinese and "invalid_api_key" in chinese


def _lines_until(bridge: subprocess.Popen, request_id: int, seconds: float = 60) -> list[dict]:
    """The messages the bridge writes to Claude Desktop, up to the answer to `request_id`."""
    messages: list[dict] = []

    def read() -> None:
        for line in bridge.stdout:
            messages.append(json.loads(line))
            if messages[-1].get("id") == request_id:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds)
    return messages


def test_with_a_good_key_mcp_remote_connects_and_relays_progress(
    node, asgi_live_server, published, tenant_admin, make_key, scripted_llm, tmp_path
):
    scripted_llm.set_rules({"name": "slow", "when": {}, "reply": {"text": "South, 30 degrees, twelve panels.",
                                                                  "chunk_size": 4, "delay": 0.3}})  # fmt: skip
    _row, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])
    bridge = _bridge(node, asgi_live_server.url, tmp_path, {"Authorization": f"Bearer {secret}", **EN})
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": published.solar.slug, "arguments": {"message": "Which way?"},
                       "_meta": {"progressToken": "claude-1"}}}  # fmt: skip
    try:
        bridge.stdin.write(json.dumps(INITIALIZE) + "\n")
        bridge.stdin.flush()
        (answer,) = _lines_until(bridge, 0)
        assert answer["result"]["serverInfo"]["name"] == "agentplat"
        for message in ({"jsonrpc": "2.0", "method": "notifications/initialized"}, call):
            bridge.stdin.write(json.dumps(message) + "\n")
        bridge.stdin.flush()
        messages = _lines_until(bridge, 1)
    finally:
        bridge.kill()
        bridge.communicate()
    *notes, result = messages
    assert result["result"]["structuredContent"]["reply"] == "South, 30 degrees, twelve panels."
    assert len(notes) >= 3 and all(note["method"] == "notifications/progress" for note in notes)
    assert all(note["params"]["progressToken"] == "claude-1" for note in notes)
    assert notes[0]["params"]["message"] == "The agent is working on it."


def test_the_oauth_paths_say_the_server_takes_keys(client, published, tenant_admin, make_key):
    _row, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])
    _row, chat_only = make_key(tenant_admin, scopes=[KeyScope.CHAT])
    en = {"HTTP_ACCEPT_LANGUAGE": "en"}
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
        resource = client.get(path, **en)
        assert resource.status_code == 404 and resource["content-type"] == "application/json"
        assert resource.json()["error_description"].startswith("This MCP server takes an API key, not OAuth")
    metadata = client.get("/.well-known/oauth-authorization-server").json()
    assert metadata["registration_endpoint"] == "http://testserver/mcp/oauth/register"
    assert metadata["authorization_endpoint"] == "http://testserver/api/keys/"
    assert {"issuer", "token_endpoint", "response_types_supported"} <= set(metadata)

    def register(authorization: str | None) -> dict:
        headers = {**en, **({"HTTP_AUTHORIZATION": authorization} if authorization else {})}
        answer = client.post("/mcp/oauth/register", data="{}", content_type="application/json", **headers)
        assert answer.status_code == 400
        assert answer.json()["error"] == "invalid_client_metadata"
        return answer.json()["error_description"]

    assert register("Bearer ak-nope.x").startswith("This API key is not valid. (invalid_api_key)")
    assert register(None).startswith("Send an API key")
    assert register(f"Bearer {chat_only}").startswith("This API key does not have the “mcp” scope.")
    assert register(f"Bearer {secret}").startswith("This MCP server takes an API key, not OAuth")
    grant = client.post("/mcp/oauth/token", data={"grant_type": "authorization_code"}, **en)
    assert grant.status_code == 400 and grant.json()["error"] == "unsupported_grant_type"
    assert client.get("/mcp/oauth/register").status_code == 405

"""The examples of docs/mcp.md run as written: the MCP server (mcp 2.x's MCPServer) serves its tool to the platform's
own client, and the Python client completes a turn longer than httpx's default 5 s read timeout, its progress
printed as it comes."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import time

import pytest
from django.conf import settings

from api.models import KeyScope
from toolservers.client import Connection, call_tool, list_tools

pytestmark = pytest.mark.django_db(transaction=True)

DOCS = settings.BASE_DIR / "docs" / "mcp.md"


def example(name: str) -> str:
    """The python block after `<!-- example: name` in docs/mcp.md."""
    found = re.search(rf"<!-- example: {re.escape(name)}\b[^>]*-->\n```python\n(.*?)\n```", DOCS.read_text(), re.S)
    assert found, f"docs/mcp.md has no example {name}"
    return found.group(1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(port: int, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def test_the_server_example_serves_its_tool_to_the_platforms_client(tmp_path):
    port = _free_port()
    source = example("mcp-server")
    assert "MCPServer" in source and "port=8800" in source
    script = tmp_path / "tools_server.py"
    script.write_text(source.replace("port=8800", f"port={port}"))
    server = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_for(port)
        connection = Connection(name="docs example", url=f"http://127.0.0.1:{port}/mcp", private_allowed=True)
        listing = asyncio.run(list_tools(connection))
        (tool,) = listing.tools
        assert tool.name == "panel_count" and tool.description.startswith("How many solar panels")
        assert tool.input_schema["required"] == ["roof_m2"]
        result = asyncio.run(call_tool(connection, "panel_count", {"roof_m2": 10}))
        assert (result.text, result.is_error) == ("5", False)
    finally:
        server.kill()
        server.communicate()


def test_the_client_example_outlives_a_turn_longer_than_httpx_default_timeout(
    asgi_live_server, published, tenant_admin, make_key, scripted_llm, tmp_path
):
    # 12 pieces of 5 characters 0.6 s apart, both replies: each turn over 7 s, longer than httpx's 5 s default.
    reply = {"text": "Panels facing south: about 12 of them, if shade allows.", "chunk_size": 5, "delay": 0.6}
    scripted_llm.set_rules({"name": "slow", "when": {}, "reply": reply})
    _key, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])
    source = example("mcp-client")
    placeholders = 'URL, KEY, AGENT = "https://agents.example.com/mcp", "ak-…", "solar-advisor"'
    assert placeholders in source
    mine = f'URL, KEY, AGENT = "{asgi_live_server.url}/mcp", "{secret}", "{published.solar.slug}"'
    # What a default httpx client would wait in silence: the example's longer read timeout is not what saves it.
    script = tmp_path / "client.py"
    script.write_text(source.replace(placeholders, mine).replace("read=300", "read=5"))
    started = time.monotonic()
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(settings.BASE_DIR), "LANG": "C.UTF-8"})  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert time.monotonic() - started > 10  # two turns of over 5 s each
    lines = ran.stdout.splitlines()
    assert lines[0] == str([(published.solar.slug, "Solar advisor"), ("guang-fu-ce-suan", "光伏测算")])
    assert lines.count("Panels facing south: about 12 of them, if shade allows.") == 2
    progress = [line for line in lines if line.startswith("… ")]
    assert progress[0] == "… 智能体正在处理。" or progress[0] == "… The agent is working on it."
    assert len(progress) >= 6

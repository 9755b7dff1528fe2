"""The README's sample MCP server journey, in a Chinese browser: start scripts/sample_mcp_server.py, add it as a
tenant admin (Admin › MCP servers), enable its tools, give them to an agent, publish, chat with the offline demo
model, and see the tool call's progress line and the answer in Chinese."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from llm.demo import demo_engine
from tests.browser.pages import PASSWORD, log_in, say, start_conversation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SAMPLE = Path(settings.BASE_DIR) / "scripts" / "sample_mcp_server.py"
AGENT = "通用助手 / General assistant"


@pytest.fixture
def demo(transactional_db):
    call_command("seed_demo", password=PASSWORD, stdout=open(os.devnull, "w"))  # noqa: SIM115


@pytest.fixture
def sample_server():
    """scripts/sample_mcp_server.py as the README starts it, on a free port; its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(SAMPLE), "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the sample MCP server did not start: {process.stdout.read().decode(errors='replace')}")
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(10)


@pytest.fixture
def quick_demo_model(monkeypatch):
    """The demo model without its typing pace (only slows the test down)."""
    monkeypatch.setitem(demo_engine().defaults, "delay", 0)


def test_the_sample_mcp_servers_tool_is_called_in_the_chat(
    asgi_live_server, demo, sample_server, quick_demo_model, page_for, settings
):
    settings.MCP_ALLOW_PRIVATE_URLS = True  # the README's MCP_ALLOW_PRIVATE_URLS=1: the server is on this machine
    base = asgi_live_server.url
    page = page_for("zh-CN")
    page.set_default_timeout(30_000)  # the journey's pages and the demo-model turns on a busy machine
    log_in(page, base, "energy-admin")

    # Admin › MCP servers › Add, "Save and continue editing": the server's tools are listed, all disabled.
    page.goto(f"{base}/admin/toolservers/toolserver/add/")
    page.fill("#id_name", "示例工具")
    page.fill("#id_slug", "sample")
    page.fill("#id_url", sample_server)
    with page.expect_navigation():
        page.click("input[name=_continue]")
    rows = page.locator("#tools-group tbody tr.form-row")
    assert sorted(rows.locator("td.field-name").all_inner_texts()) == ["convert_units", "weather"]
    for name in ("weather", "convert_units"):
        row = rows.filter(has=page.locator("td.field-name", has_text=name))
        assert not row.locator("input[name$=-enabled]").is_checked()
        row.locator("input[name$=-enabled]").check()
    with page.expect_navigation():
        page.click("input[name=_save]")

    # The agent: tick the two tools under "MCP server: 示例工具", save, publish.
    page.goto(f"{base}/agents/")
    with page.expect_navigation():
        page.click(f".agent-table a:has-text('{AGENT}')")
    with page.expect_navigation():
        page.click("#edit-agent")
    group = page.locator("#tool-table tr.tool-group", has_text="示例工具")
    assert group.count() == 1
    for name in ("mcp__sample__weather", "mcp__sample__convert_units"):
        page.locator(f"#tool-table tr[data-tool='{name}'] input[type=checkbox]").check()
    with page.expect_navigation():
        page.click("#save-agent")
    page.click("#publish-agent")
    with page.expect_navigation():
        page.click("#confirm-publish")

    # The chat: the demo model calls the weather tool the message speaks of, then answers in Chinese.
    start_conversation(page, base, AGENT)
    reply = say(page, "北京今天天气怎么样？", timeout=60_000)
    assert reply.startswith("工具已返回结果（演示模型）") and "北京 / Beijing：晴 / sunny" in reply, reply
    progress = page.locator(".chat-tool").all_inner_texts()
    assert progress == ["工具「示例工具 › weather」已完成"], progress
    reply = say(page, "100 华氏度是多少摄氏度？", timeout=60_000)
    assert "100 °F = 37.78 °C" in reply, reply
    assert page.locator(".chat-tool").all_inner_texts()[-1] == "工具「示例工具 › convert_units」已完成"
    if os.environ.get("SCREENSHOTS") == "1":  # the README's picture (docs/img), as bench/screens/take.py takes them
        page.set_viewport_size({"width": 1280, "height": 800})
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(Path(settings.BASE_DIR) / "docs" / "img" / "chat-mcp-sample.png"))

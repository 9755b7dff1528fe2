"""Progress of a long turn at /mcp: a tools/call that carries a progress token (`_meta.progressToken`, what the `mcp`
client sends when given a progress callback) is answered as an SSE stream of `notifications/progress`, then the
result; without one the answer stays plain JSON. Driven by the `mcp` package's client against Daphne serving the
project, the scripted model streaming its reply slowly."""

from __future__ import annotations

import asyncio
import json

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from agents import frames
from api import mcp_progress
from api.mcp_progress import TurnProgress
from api.mcp_server import wants_progress
from api.models import KeyScope

pytestmark = pytest.mark.django_db(transaction=True)

REPLY = "South-facing panels at a 30 degree tilt give the most power over the year."  # 76 characters
# 16 pieces of 5 characters, 0.3 s apart: a turn of about 5 s, twice the client's read timeout below.
SLOW = {"text": REPLY, "chunk_size": 5, "delay": 0.3, "first_delay": 0.3}
READ_TIMEOUT = 2.5


async def _call(url: str, secret: str, name: str, progress: list | None, timeout: float = READ_TIMEOUT):
    async def record(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    headers = {"Authorization": f"Bearer {secret}", "Accept-Language": "en"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10, read=timeout)) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        callback = record if progress is not None else None
        return await session.call_tool(name, {"message": "Which way?"}, progress_callback=callback)


def test_a_long_turn_reports_progress_and_outlives_the_read_timeout(
    asgi_live_server, published, tenant_admin, make_key, scripted_llm
):
    scripted_llm.set_rules({"name": "slow", "when": {}, "reply": SLOW})
    _key, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])
    progress: list[tuple[float, float | None, str | None]] = []
    result = asyncio.run(_call(asgi_live_server.url, secret, published.solar.slug, progress))
    assert not result.is_error
    assert result.content[0].text == REPLY and result.structured_content["reply"] == REPLY
    values = [value for value, _total, _message in progress]
    assert values == sorted(set(values)) and values[0] == 1  # each notification's progress above the last
    assert all(total is None for _value, total, _message in progress)
    messages = [message for _value, _total, message in progress]
    assert messages[0] == "The agent is working on it."
    counts = [int(m.split(": ")[1].split()[0]) for m in messages[1:]]
    assert len(counts) >= 3 and counts == sorted(counts) and 0 < counts[-1] <= len(REPLY)
    assert all(m == f"Writing the reply: {n} characters so far." for m, n in zip(messages[1:], counts, strict=True))


def test_without_a_progress_token_the_answer_is_json_and_a_long_turn_outlasts_the_read_timeout(
    asgi_live_server, published, tenant_admin, make_key, scripted_llm
):
    """The finding: the plain JSON answer says nothing until the turn ends, so a turn longer than the client's read
    timeout (httpx's default is 5 s) kills the call. With enough read timeout it completes."""
    scripted_llm.set_rules({"name": "slow", "when": {}, "reply": SLOW})
    _key, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])
    with pytest.raises(BaseException) as raised:  # the client's error, wrapped in its task groups' groups
        asyncio.run(asyncio.wait_for(_call(asgi_live_server.url, secret, published.solar.slug, None), 20))
    assert "ReadTimeout" in repr(raised.value) or "Timeout" in type(raised.value).__name__, repr(raised.value)
    result = asyncio.run(_call(asgi_live_server.url, secret, published.solar.slug, None, timeout=30))
    assert result.content[0].text == REPLY


def test_a_silent_model_still_sends_a_heartbeat(
    asgi_live_server, published, tenant_admin, make_key, scripted_llm, monkeypatch
):
    monkeypatch.setattr(mcp_progress, "HEARTBEAT_SECONDS", 0.4)
    scripted_llm.set_rules({"name": "quiet", "when": {}, "reply": {"text": "Done.", "stall": 2.5}})
    _key, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])
    progress: list[tuple[float, float | None, str | None]] = []
    result = asyncio.run(_call(asgi_live_server.url, secret, published.solar.slug, progress))
    assert result.content[0].text == "Done."
    still = [message for _value, _total, message in progress if message.startswith("Still working")]
    assert len(still) >= 2, progress  # nothing came from the model for 2.5 s, yet the stream kept talking


def test_the_answer_is_sse_only_for_a_call_with_a_token(asgi_live_server, published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])
    headers = {"Authorization": f"Bearer {secret}", "Accept": "application/json, text/event-stream"}
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": published.solar.slug, "arguments": {"message": "hi"}}}  # fmt: skip
    with_token = {**call, "params": {**call["params"], "_meta": {"progressToken": "p-1"}}}
    with httpx2.Client(timeout=30) as http:
        url = f"{asgi_live_server.url}/mcp"
        plain = http.post(url, json=call, headers=headers)
        assert plain.headers["content-type"] == "application/json"
        assert plain.json()["result"]["structuredContent"]["reply"] == "You said: hi"
        streamed = http.post(url, json=with_token, headers=headers)
        assert streamed.headers["content-type"].startswith("text/event-stream")
        assert streamed.headers["x-accel-buffering"] == "no"  # (sse_starlette's) a proxy passes events on at once
        events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert events[0]["method"] == "notifications/progress"
        assert events[0]["params"]["progressToken"] == "p-1" and events[0]["params"]["progress"] == 1
        assert events[-1]["id"] == 5 and events[-1]["result"]["structuredContent"]["reply"] == "You said: hi"
        json_only = http.post(url, json=with_token, headers={**headers, "Accept": "application/json"})
        assert json_only.headers["content-type"] == "application/json"  # a client that takes no stream: JSON


def test_which_requests_are_streamed():
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a", "_meta": {"progressToken": 7}}}
    sse = "application/json, text/event-stream"
    assert wants_progress(json.dumps(call).encode(), sse)
    assert not wants_progress(json.dumps(call).encode(), "application/json")
    assert not wants_progress(json.dumps({**call, "method": "tools/list"}).encode(), sse)
    assert not wants_progress(json.dumps({**call, "params": {"_meta": {"progressToken": True}}}).encode(), sse)
    assert not wants_progress(json.dumps({**call, "params": {"name": "a"}}).encode(), sse)
    assert not wants_progress(b"progressToken, not json", sse)


class _Session:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    async def send_progress_notification(self, token, progress, total=None, message=None, related_request_id=None):
        self.sent.append({"token": token, "progress": progress, "message": message, "request": related_request_id})


async def test_a_tool_step_is_reported_by_its_label_in_the_callers_language(tenant):
    session = _Session()
    reporter = TurnProgress(session, "t", 3, tenant, "zh-hans")
    await reporter.emit(frames.Tool(index=0, name="deep_think", status=frames.ToolStatus.STARTED))
    await reporter._send()
    await reporter.emit(frames.Tool(index=0, name="deep_think", status=frames.ToolStatus.FAILED))
    await reporter._send()
    english = TurnProgress(session, "t", 3, tenant, "en")
    await english.emit(frames.Tool(index=0, name="deep_think", status=frames.ToolStatus.COMPLETED))
    await english._send()
    messages = [s["message"] for s in session.sent]
    assert messages == ["正在运行“深度思考”。", "“深度思考”未完成。", "“Deep thinking” done."]
    assert [s["progress"] for s in session.sent] == [1.0, 2.0, 1.0] and session.sent[0]["request"] == "3"

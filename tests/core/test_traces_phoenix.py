"""Traces reach a real collector: Arize Phoenix (its own virtualenv, .venv-phoenix; `make phoenix`) receives a chat
turn's spans over OTLP/HTTP from the platform's own configuration (TRACES_ENABLED and the standard OTLP endpoint
variable), and its REST API gives back the names, the parent/child tree and the token counts."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from core import tracing
from core.db import database_sync_to_async
from llm.models import LLMCall
from tenants.scope import tenant_scope
from tests.core.traces import KNOWLEDGE_TOOL, make_conversation, script_tool_turn, turn

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("PHOENIX_VENV", ROOT / ".venv-phoenix"))
REQUIREMENTS = ROOT / "requirements-phoenix.txt"
START_SECONDS = 120


def _phoenix_bin() -> Path:
    """Phoenix's command, building its virtualenv first when it is missing (as `make phoenix` does)."""
    binary = VENV / "bin" / "phoenix"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)], check=True
        )
    return binary


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - a local test server
        return json.loads(response.read() or b"null")


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    """A Phoenix server on free ports with an empty working directory; its base URL."""
    port, grpc_port = _free_port(), _free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(tmp_path_factory.mktemp("phoenix")),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = tmp_path_factory.mktemp("phoenix-log") / "phoenix.log"
    with log.open("wb") as out:
        process = subprocess.Popen([str(_phoenix_bin()), "serve"], env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_SECONDS
    try:
        while True:
            try:
                _get(f"{base}/v1/projects")
                break
            except OSError:
                assert process.poll() is None, f"Phoenix exited: {log.read_text(errors='replace')[-3000:]}"
                assert time.monotonic() < deadline, f"Phoenix did not start: {log.read_text(errors='replace')[-3000:]}"
                time.sleep(0.25)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def _spans(base: str, trace_id: str | None = None) -> list[dict]:
    data = _get(f"{base}/v1/projects/default/spans?limit=1000")["data"]
    return [span for span in data if trace_id is None or span["context"]["trace_id"] == trace_id]


def _calls(tenant, conversation):
    with tenant_scope(tenant):
        return list(LLMCall.objects.filter(conversation_id=conversation.pk).order_by("id"))


async def _received(base: str, count: int) -> list[dict]:
    """The spans Phoenix has stored once `count` of them arrived (it ingests in the background)."""
    deadline = time.monotonic() + 30
    while True:
        spans = await asyncio.to_thread(_spans, base)
        if len(spans) >= count or time.monotonic() > deadline:
            return spans
        await asyncio.sleep(0.2)


async def test_phoenix_receives_a_chat_turns_spans_over_otlp_http(
    tenant, member, scripted_llm, settings, monkeypatch, phoenix
):
    settings.MEMORY_EXTRACT_IN_THREAD = False
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{phoenix}/v1/traces")
    settings.TRACES_ENABLED = True  # the one setting; the batching OTLP/HTTP exporter of production
    tracing.reset()
    try:
        conversation, _kb = await make_conversation(tenant, member, scripted_llm)
        script_tool_turn(scripted_llm)
        _user, reply, _sink = await turn(tenant, conversation, "香菇黄焖鸡多少钱？")
        assert tracing.flush()
    finally:
        tracing.reset()

    spans = await _received(phoenix, 6)
    (root,) = [span for span in spans if span["parent_id"] is None]
    assert root["name"] == "invoke_agent Waiter" and len({span["context"]["trace_id"] for span in spans}) == 1
    by_id = {span["context"]["span_id"]: span for span in spans}
    parent_of = {span["name"]: by_id[span["parent_id"]]["name"] for span in spans if span["parent_id"]}
    assert parent_of == {
        "memory_recall": "invoke_agent Waiter",
        "chat gpt-4": "invoke_agent Waiter",
        f"execute_tool {KNOWLEDGE_TOOL}": "invoke_agent Waiter",
        "retrieval": f"execute_tool {KNOWLEDGE_TOOL}",
    }
    names = ["invoke_agent Waiter", "memory_recall", "chat gpt-4", "chat gpt-4", f"execute_tool {KNOWLEDGE_TOOL}"]
    assert sorted(span["name"] for span in spans) == sorted([*names, "retrieval"])
    models = sorted((span for span in spans if span["name"] == "chat gpt-4"), key=lambda span: span["start_time"])
    calls = await database_sync_to_async(_calls)(tenant, conversation)
    assert [
        (span["attributes"]["gen_ai.usage.input_tokens"], span["attributes"]["gen_ai.usage.output_tokens"])
        for span in models
    ] == [(call.prompt_tokens, call.completion_tokens) for call in calls]
    assert root["attributes"]["gen_ai.usage.input_tokens"] == reply.usage["prompt_tokens"] > 0
    assert root["attributes"]["gen_ai.conversation.id"] == str(conversation.pk)
    assert [span["attributes"]["gen_ai.response.finish_reasons"] for span in models] == [["tool_calls"], ["stop"]]

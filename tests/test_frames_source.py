"""The stream's frames are built in one module (agents.frames); nothing else writes a frame dict by hand, and no
module reaches into llm.client for a helper that is not about models."""

from __future__ import annotations

import ast
from pathlib import Path

from agents import frames

ROOT = Path(__file__).resolve().parent.parent
APPS = ("agents", "chat", "config", "core", "knowledge", "llm", "memory", "plans", "tenants")
FRAME_TYPES = {
    cls.type for cls in vars(frames).values() if isinstance(cls, type) and issubclass(cls, frames.Frame) and cls.type
}


def _sources():
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_the_frames_module_knows_every_frame_of_the_protocol():
    assert {"user_message", "delta", "tool", "step", "plan", "done", "error", "hello", "gap"} == FRAME_TYPES


def test_no_frame_dict_literal_outside_the_frames_module():
    found = []
    for path, tree in _sources():
        if path == ROOT / "agents" / "frames.py":
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values, strict=True):
                is_type_key = isinstance(key, ast.Constant) and key.value == "type"
                if is_type_key and isinstance(value, ast.Constant) and value.value in FRAME_TYPES:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {value.value}")
    assert found == []


def test_the_check_sees_a_hand_built_frame():
    tree = ast.parse('frame = {"type": "delta", "index": 0, "content": "x"}')
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.Dict))
    assert node.keys[0].value == "type" and node.values[0].value in FRAME_TYPES


def test_nothing_imports_a_helper_that_is_not_about_models_from_llm_client():
    allowed = {
        "ChatResult", "Finished", "TextDelta", "ToolCall", "ToolCallStarted", "Usage", "backoff_delay",
        "complete_chat", "embed_texts", "flush_records", "stream_chat",
    }  # fmt: skip
    found = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "llm.client":
                found += [f"{path.relative_to(ROOT)}: {a.name}" for a in node.names if a.name not in allowed]
    assert found == []
    client = ast.parse((ROOT / "llm" / "client.py").read_text(encoding="utf-8"))
    defined = {node.name for node in client.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    assert "database_sync_to_async" not in defined  # core.db has the database hop

"""The stream's frames are built in one module (agents.frames); nothing else writes a frame dict by hand, and no
module reaches into llm.client for a helper that is not about models."""

from __future__ import annotations

import ast

import pytest

from agents import frames
from tests.sources import ROOT, first_party_packages, parsed_sources

FRAMES_MODULE = ROOT / "agents" / "frames.py"
FRAME_TYPES = {
    cls.type for cls in vars(frames).values() if isinstance(cls, type) and issubclass(cls, frames.Frame) and cls.type
}


def _frame_constants(node: ast.AST) -> list[str]:
    """The frame type names a comparison's operand spells out: a string, or strings in a tuple, list or set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in FRAME_TYPES:
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [name for element in node.elts for name in _frame_constants(element)]
    return []


def _reads_a_type(node: ast.AST) -> bool:
    """x["type"], x.get("type"), x.type, or a name that holds one (`kind`, as a socket's message kind is named)."""
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "type"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "type"
    if isinstance(node, ast.Attribute):
        return node.attr == "type"
    return isinstance(node, ast.Name) and node.id in ("kind", "frame_type")


def hand_made_frames(tree: ast.AST) -> list[str]:
    """What the frames module alone may do, done by hand: a frame dict literal ({"type": "delta", ...}), a frame's
    type compared with a frame type name (== "done", in ("done", "error")), or a frame's JSON text searched for
    ('"type":"error"' in body). A chat message's role "tool" is not a frame type: it is compared with a role."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                is_type_key = isinstance(key, ast.Constant) and key.value == "type"
                if is_type_key and isinstance(value, ast.Constant) and value.value in FRAME_TYPES:
                    found.append(f"{node.lineno}: a {value.value} frame built by hand")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_reads_a_type(operand) for operand in operands):
                for name in (n for operand in operands for n in _frame_constants(operand)):
                    found.append(f"{node.lineno}: the frame type {name!r} compared")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and '"type":"' in node.value:
            found.append(f"{node.lineno}: frame JSON text searched")
    return found


def test_the_frames_module_knows_every_frame_of_the_protocol():
    assert {"user_message", "delta", "tool", "step", "plan", "done", "error", "hello", "gap"} == FRAME_TYPES


def test_every_app_is_checked():
    names = {app.name for app in first_party_packages()}
    assert {"agents", "api", "chat", "config", "core", "engine", "knowledge", "llm", "memory", "plans"} <= names


def test_no_frame_is_made_or_read_by_hand_outside_the_frames_module():
    found = []
    for path, tree in parsed_sources():
        if path != FRAMES_MODULE:
            found += [f"{path.relative_to(ROOT)}:{where}" for where in hand_made_frames(tree)]
    assert found == []


@pytest.mark.parametrize(
    "planted",
    [
        'frame = {"type": "done", "message_id": 1}',
        'if frame["type"] == "delta": pass',
        'ended = frame.get("type") in ("done", "error")',
        'if \'"type":"error"\' in body: pass',
    ],
)
def test_the_check_fails_on_a_planted_hand_made_frame(tmp_path, planted):
    module = tmp_path / "planted.py"
    module.write_text(planted + "\n", encoding="utf-8")
    assert hand_made_frames(ast.parse(module.read_text(encoding="utf-8"))) != []


def test_the_check_passes_typed_frames():
    source = "if isinstance(frame, frames.Done) and frames.ends_turn(frame): body = frames.Delta(content='x')"
    assert hand_made_frames(ast.parse(source)) == []


def test_nothing_imports_a_helper_that_is_not_about_models_from_llm_client():
    allowed = {
        "ChatResult", "Event", "Finished", "TextDelta", "ToolCall", "ToolCallStarted", "Usage", "backoff_delay",
        "complete_chat", "embed_texts", "stream_chat",
    }  # fmt: skip
    found = []
    for path, tree in parsed_sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "llm.client":
                found += [f"{path.relative_to(ROOT)}: {a.name}" for a in node.names if a.name not in allowed]
    assert found == []
    client = ast.parse((ROOT / "llm" / "client.py").read_text(encoding="utf-8"))
    defined = {node.name for node in client.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    assert "database_sync_to_async" not in defined  # core.db has the database hop

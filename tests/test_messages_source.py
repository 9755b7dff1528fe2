"""Chat messages are built in one module (llm.messages): no other first-party module writes a chat message dict
({"role": "user", "content": ...}) by hand, so the wire form the provider receives has one author."""

from __future__ import annotations

import ast

import pytest

from llm.messages import ROLES
from tests.sources import ROOT, first_party_packages, parsed_sources

MESSAGES_MODULE = ROOT / "llm" / "messages.py"
# Keys only a chat message has beside its role: a dict with a role and one of these is a message.
MESSAGE_KEYS = {"content", "tool_calls", "tool_call_id"}


def _is_message(keys: dict[str, ast.AST]) -> bool:
    """A role that is a chat role spelled out ("tool"), or a role beside a message's own keys."""
    role = keys.get("role")
    if role is None:
        return False
    return (isinstance(role, ast.Constant) and role.value in ROLES) or bool(MESSAGE_KEYS & keys.keys())


def hand_made_messages(tree: ast.AST) -> list[str]:
    """Chat messages written as dicts: a literal {"role": "user", ...} or dict(role=..., content=...). A dict that
    has a role of another kind (a membership's, a plan log's {"role": "planner"}) is not one."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {
                key.value: value
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            }
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            keys = {keyword.arg: keyword.value for keyword in node.keywords if keyword.arg}
        else:
            continue
        if _is_message(keys):
            found.append(f"{node.lineno}: a chat message built by hand")
    return found


def test_every_app_is_checked():
    names = {app.name for app in first_party_packages()}
    assert {"agents", "api", "chat", "config", "core", "engine", "knowledge", "llm", "memory", "plans"} <= names


def test_no_chat_message_is_made_by_hand_outside_the_messages_module():
    found = []
    for path, tree in parsed_sources():
        if path != MESSAGES_MODULE:
            found += [f"{path.relative_to(ROOT)}:{where}" for where in hand_made_messages(tree)]
    assert found == []


@pytest.mark.parametrize(
    "planted",
    [
        'messages = [{"role": "system", "content": prompt}]',
        'message = {"role": "tool", "tool_call_id": call_id, "content": text}',
        'message = {"role": role, "content": content or ""}',
        "message = {'role': Role.ASSISTANT, 'content': None, 'tool_calls': parts}",
        'message = dict(role="user", content=text)',
    ],
)
def test_the_check_fails_on_a_planted_hand_made_message(tmp_path, planted):
    module = tmp_path / "planted.py"
    module.write_text(planted + "\n", encoding="utf-8")
    assert hand_made_messages(ast.parse(module.read_text(encoding="utf-8"))) != []


def test_the_check_passes_typed_messages_and_other_roles():
    source = (
        "messages = [ChatMessage.system(prompt), ChatMessage.tool(call_id, text)]\n"
        'Membership.objects.update_or_create(user=user, defaults={"role": role})\n'
        'plan_log(data={"role": "planner", "call_id": 3})\n'
    )
    assert hand_made_messages(ast.parse(source)) == []

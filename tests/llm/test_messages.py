"""The typed chat message writes exactly the wire dicts the provider has always received, and reads them back."""

from __future__ import annotations

import json

import pytest

from llm.messages import ROLES, ChatMessage, Role, wire
from memory.models import Role as StoredRole

CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Rome"}'}}


@pytest.mark.parametrize(
    ("message", "sent"),
    [
        (ChatMessage.system("Be brief."), '{"role": "system", "content": "Be brief."}'),
        (ChatMessage.user("你好"), '{"role": "user", "content": "你好"}'),
        (ChatMessage.assistant("Hello."), '{"role": "assistant", "content": "Hello."}'),
        # Beside tool calls an empty text is sent as null: some compatible servers reject "".
        (
            ChatMessage.assistant("", tool_calls=[CALL]),
            '{"role": "assistant", "content": null, "tool_calls": [' + json.dumps(CALL) + "]}",
        ),
        (
            ChatMessage.tool("call_1", "sunny"),
            '{"role": "tool", "tool_call_id": "call_1", "content": "sunny"}',
        ),
        (
            ChatMessage.tool("call_1", "sunny", name="weather"),
            '{"role": "tool", "tool_call_id": "call_1", "content": "sunny", "name": "weather"}',
        ),
    ],
)
def test_as_dict_is_the_wire_form_key_for_key(message, sent):
    assert json.dumps(message.as_dict(), ensure_ascii=False) == sent
    assert ChatMessage.from_dict(json.loads(sent)) == message


def test_a_stored_message_is_sent_as_before():
    assert ChatMessage.from_stored("assistant", "", [], None).as_dict() == {"role": "assistant", "content": ""}
    assert ChatMessage.from_stored("assistant", "", [CALL], None).as_dict() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [CALL],
    }
    assert ChatMessage.from_stored("tool", "", None, None).as_dict() == {
        "role": "tool",
        "tool_call_id": "",
        "content": "",
    }
    assert ChatMessage.from_stored("user", "hi", None, "").as_dict() == {"role": "user", "content": "hi"}


def test_an_unknown_role_is_refused():
    with pytest.raises(ValueError, match="Unknown message role 'developer'"):
        ChatMessage.from_dict({"role": "developer", "content": "x"})


def test_the_stored_roles_are_the_message_roles():
    assert {choice.value for choice in StoredRole} == ROLES
    assert StoredRole.TOOL == Role.TOOL


def test_wire_keeps_the_order():
    assert wire([ChatMessage.system("a"), ChatMessage.user("b")]) == [
        {"role": "system", "content": "a"},
        {"role": "user", "content": "b"},
    ]

"""The chat message every model request is made of, typed once (the OpenAI chat format).

Code builds a `ChatMessage` with its constructors (`ChatMessage.system(...)`, `.user(...)`, `.assistant(...)`,
`.tool(...)`) and hands it to `llm.client.stream_chat`; `as_dict()` is the one place that writes the wire dict
the provider receives, and `from_dict()` reads one back (a stored goal run, a client's history). No module
writes a `{"role": ...}` dict by hand (tests/test_messages_source.py checks it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class Role:
    """The roles of a chat message (memory.models.Role stores the same values)."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


ROLES = frozenset({Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL})


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a chat request. `tool_calls` (an assistant's, in the OpenAI form), `tool_call_id` (a tool
    result's) and `name` are left out of the wire dict when None; `content` is always there (None beside tool
    calls: some compatible servers reject an empty string). `parts`: OpenAI content parts after the text (an
    image_url of a file sent in the conversation); with them the wire `content` is a list of parts."""

    role: str
    content: str | None
    tool_calls: tuple[Mapping[str, Any], ...] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    parts: tuple[Mapping[str, Any], ...] | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"Unknown message role {self.role!r}: use one of {sorted(ROLES)}.")

    @classmethod
    def system(cls, content: str) -> ChatMessage:
        return cls(Role.SYSTEM, content)

    @classmethod
    def user(cls, content: str, *, parts: Iterable[Mapping[str, Any]] | None = None) -> ChatMessage:
        """A user's message; `parts` (image_url parts) follow its text."""
        return cls(Role.USER, content, parts=tuple(parts) if parts else None)

    @classmethod
    def assistant(cls, content: str | None, *, tool_calls: Iterable[Mapping[str, Any]] | None = None) -> ChatMessage:
        """A reply; with `tool_calls` (even none), the calls it makes and its text, None when it has none."""
        if tool_calls is None:
            return cls(Role.ASSISTANT, content)
        return cls(Role.ASSISTANT, content or None, tool_calls=tuple(tool_calls))

    @classmethod
    def tool(cls, call_id: str, content: str, *, name: str | None = None) -> ChatMessage:
        """The result of the call `call_id`."""
        return cls(Role.TOOL, content, tool_call_id=call_id, name=name)

    @classmethod
    def from_stored(
        cls, role: str, content: str | None, tool_calls: Sequence[Mapping[str, Any]] | None, tool_call_id: str | None
    ) -> ChatMessage:
        """A stored message (memory.models.Message's fields) as it is sent: an assistant's empty `tool_calls` are
        left out, a missing text or call id is sent as ""."""
        if role == Role.ASSISTANT and tool_calls:
            return cls.assistant(content, tool_calls=tool_calls)
        if role == Role.TOOL:
            return cls.tool(tool_call_id or "", content or "")
        return cls(role, content or "")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChatMessage:
        """A wire dict read back (a stored goal run's messages, a request's): the inverse of as_dict."""
        tool_calls = data.get("tool_calls")
        content, parts = data.get("content"), None
        if isinstance(content, list):
            texts = [
                part.get("text", "") for part in content if isinstance(part, Mapping) and part.get("type") == "text"
            ]
            others = tuple(part for part in content if isinstance(part, Mapping) and part.get("type") != "text")
            content, parts = "".join(texts), others or None
        return cls(
            data["role"],
            content,
            tool_calls=tuple(tool_calls) if tool_calls is not None else None,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            parts=parts,
        )

    def as_dict(self) -> dict[str, Any]:
        """The message as the provider receives it (and as llm.tokens counts it)."""
        data: dict[str, Any] = {"role": self.role}
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        data["content"] = self._wire_content()
        if self.tool_calls is not None:
            data["tool_calls"] = list(self.tool_calls)
        if self.name is not None:
            data["name"] = self.name
        return data

    def _wire_content(self) -> str | list[dict[str, Any]] | None:
        if not self.parts:
            return self.content
        text = [{"type": "text", "text": self.content}] if self.content else []
        return [*text, *(dict(part) for part in self.parts)]

    @property
    def text(self) -> str:
        """The content, "" when there is none."""
        return self.content or ""


def wire(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as the request's `messages` list."""
    return [message.as_dict() for message in messages]

"""Every frame of the chat stream (docs/stream-protocol.md), as small typed classes with one serialiser.

Runners and surfaces build these and nothing else: no frame dict is written by hand outside this module, and no
frame's `type` string is compared outside it. A sink (`agents.runtime.Sink`) takes a frame; the surface that logs or
sends it calls `as_dict()` once; what is read back (the frame log, a resent turn) comes back typed through `parse`.
Field names are seed 0's (`index`, `content`, `agentChatResponse`) and the protocol's; `seq` is the frame log's, not
a frame's (`Logged` pairs them).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True, kw_only=True)
class Frame:
    """Base of every frame. `type` names it on the wire; fields listed in `omit_when_none` are left out when None."""

    type: ClassVar[str] = ""
    omit_when_none: ClassVar[frozenset[str]] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        """The frame as the protocol's JSON object (without `seq`)."""
        data: dict[str, Any] = {"type": self.type}
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if value is None and spec.name in self.omit_when_none:
                continue
            data[spec.name] = value
        return data


@dataclass(frozen=True, kw_only=True)
class TurnFrame(Frame):
    """A frame of a turn: `index` is 0 for the turn's own frames, a plan step's seqNo for that step's."""

    index: int = 0

    def at(self, index: int) -> TurnFrame:
        """The same frame under another index (a plan step's frames carry the step's seqNo)."""
        return dataclasses.replace(self, index=index)


@dataclass(frozen=True, kw_only=True)
class UserMessage(TurnFrame):
    """The stored user message, echoed to every socket of the conversation."""

    type: ClassVar[str] = "user_message"
    omit_when_none: ClassVar[frozenset[str]] = frozenset({"client_id", "duplicate", "attachments"})
    message_id: int
    content: str
    client_id: str | None = None
    # True only on a socket's own answer to a resent client_id whose frames left the log.
    duplicate: bool | None = None
    # The files sent with the message (memory.attachments.attachment_info each), None when it has none.
    attachments: list[dict] | None = None


@dataclass(frozen=True, kw_only=True)
class Delta(TurnFrame):
    """A piece of the reply text; the pieces of one index concatenate to it."""

    type: ClassVar[str] = "delta"
    content: str


class ToolStatus:
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, kw_only=True)
class Tool(TurnFrame):
    """Progress of one tool call (or one workflow step, named by its id, with `step_type`, and `tool`, the tool a
    plugin or custom step calls). Names are identifiers: pages show the tool's label (agents.tools.tool_labels)."""

    type: ClassVar[str] = "tool"
    omit_when_none: ClassVar[frozenset[str]] = frozenset({"call_id", "result", "step_type", "tool", "error", "ms"})
    name: str
    status: str
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str | None = None
    # What the tool returned, shortened; absent while it runs.
    result: str | None = None
    step_type: str | None = None
    tool: str | None = None
    error: str | None = None
    ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class Step(TurnFrame):
    """A step closes: seed 0's agentChatResponse {content, intent, data}; `agentName` on a plan step's frame."""

    type: ClassVar[str] = "step"
    omit_when_none: ClassVar[frozenset[str]] = frozenset({"agentName", "html"})
    status: str
    agentChatResponse: dict[str, Any]
    agentName: str | None = None
    # The page's form only (engine.sinks.page_frame): the result rendered as safe HTML, for the step card.
    html: str | None = None

    @classmethod
    def response(cls, *, index: int, status: str, content: str, intent: str, data: dict[str, Any] | None = None,
                 agent_name: str | None = None) -> Step:  # fmt: skip
        return cls(index=index, status=status, agentName=agent_name,
                   agentChatResponse={"content": content, "intent": intent, "data": data or {}})  # fmt: skip

    @property
    def content(self) -> str:
        return str(self.agentChatResponse.get("content") or "")


@dataclass(frozen=True, kw_only=True)
class Plan(TurnFrame):
    """The plan's state (seed 0's ExecutionPlan), sent whenever it changes."""

    type: ClassVar[str] = "plan"
    plan: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Done(TurnFrame):
    """A reply was stored: complete, or partial when cut off (then an Error follows).

    `content` is the stored text; the chat surface sends it as rendered `html` instead (content None)."""

    type: ClassVar[str] = "done"
    omit_when_none: ClassVar[frozenset[str]] = frozenset({"content", "html", "duplicate", "finish_reason"})
    message_id: int
    status: str
    usage: dict[str, int]
    content: str | None = None
    strategy: dict[str, Any] | None = None
    duplicate: bool | None = None
    html: str | None = None
    # "length" when the agent's longest reply (max_tokens) cut the reply; absent otherwise.
    finish_reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class Error(TurnFrame):
    """A turn failed or stopped (`code` from llm.errors), or, with no seq, a socket's message was refused."""

    type: ClassVar[str] = "error"
    omit_when_none: ClassVar[frozenset[str]] = frozenset({"client_id", "retry_after"})
    code: str
    message: str
    message_id: int | None = None
    user_message_id: int | None = None
    client_id: str | None = None
    retry_after: int | None = None  # seconds, with `overloaded`


@dataclass(frozen=True, kw_only=True)
class Hello(Frame):
    """Once per socket, on accept: where the log stands and whether a turn is running."""

    type: ClassVar[str] = "hello"
    conversation_id: int | None  # None: a widget visitor's socket before their first message
    last_seq: int
    running: bool


@dataclass(frozen=True, kw_only=True)
class Gap(Frame):
    """catch_up asked for frames older than the log keeps: the page reloads its history."""

    type: ClassVar[str] = "gap"
    after_seq: int
    first_seq: int


def usage_dict(prompt_tokens: int = 0, completion_tokens: int = 0) -> dict[str, int]:
    """The `usage` of a Done frame."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}


_BY_TYPE: dict[str, type[Frame]] = {
    cls.type: cls for cls in (UserMessage, Delta, Tool, Step, Plan, Done, Error, Hello, Gap)
}


def parse(data: Mapping[str, Any] | str) -> Frame:
    """The typed frame of a frame's JSON object (or text), as written by `as_dict`; a `seq` is left out. The one
    way back from the wire or the frame log to a frame. An unknown type or a missing field raises ValueError."""
    if isinstance(data, str):
        data = json.loads(data)
    cls = _BY_TYPE.get(str(data.get("type")))
    if cls is None:
        raise ValueError(f"not a frame type: {data.get('type')!r}")
    names = {spec.name for spec in dataclasses.fields(cls)}
    try:
        return cls(**{key: value for key, value in data.items() if key in names})
    except TypeError as exc:
        raise ValueError(f"a {cls.type} frame without a required field: {exc}") from exc


@dataclass(frozen=True)
class Logged:
    """A frame as a sink delivered it: with its seq in the conversation's frame log, None where nothing numbers it
    (a socket's own answer, a sink that keeps nothing)."""

    seq: int | None
    frame: Frame

    def as_dict(self) -> dict[str, Any]:
        """The wire form: `seq` first, then the frame's fields."""
        return {"seq": self.seq, **self.frame.as_dict()}

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Logged:
        """A frame log's entry (the frame's JSON object with its `seq`)."""
        return cls(int(data["seq"]), parse(data))


class ClientKind:
    """What a page sends on its socket (docs/stream-protocol.md): its message, a catch-up request, a stop."""

    USER_MESSAGE = UserMessage.type
    CATCH_UP = "catch_up"
    STOP = "stop"
    VISITOR = "visitor"  # the widget socket's first frame: its ticket and visitor id (never in its URL)


def client_kind(message: Mapping[str, Any]) -> str | None:
    """The kind of a page's socket message (a ClientKind), None when it names none of them."""
    kind = message.get("type")
    known = (ClientKind.USER_MESSAGE, ClientKind.CATCH_UP, ClientKind.STOP, ClientKind.VISITOR)
    return kind if kind in known else None


def is_error_body(body: str) -> bool:
    """Whether a frame's JSON text (frame_body: compact, `type` first) is an error frame, without parsing it: the
    bus hands every frame to sockets as text, and only errors are rewritten on the way (into the socket's language)."""
    return body.startswith('{"type":"error"')


def starts_turn(frame: Frame, message_id: int | None = None) -> bool:
    """A turn's first frame: the echo of its user message (of `message_id`, when given)."""
    return isinstance(frame, UserMessage) and (message_id is None or frame.message_id == message_id)


def ends_turn(frame: Frame) -> bool:
    """A turn's own last frame: its done or error at index 0 (a plan step's end carries the step's index)."""
    return isinstance(frame, Done | Error) and frame.index == 0

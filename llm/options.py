"""What one model call asks of the model: `ChatRequest`, its messages and the OpenAI chat-completions fields beside
them, declared once.

`CallOptions` are those fields without the messages: what an API client may set for a turn (sampling, length, output
format, the tools it runs itself). They travel from the OpenAI-compatible endpoint through the turn
(`TurnContext.options`) to the turn's requests, which are `ChatRequest`s made from them; the tool loop offers their
`tools` beside the agent's own and hands their calls back to the client instead of running them.
`llm.client.stream_chat` sends a `ChatRequest`; what is not in it (the tenant, provider, model and the names the
call record keeps) are its own arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import jsonschema

from llm.messages import ChatMessage, wire


@dataclass(frozen=True, kw_only=True)
class CallOptions:
    """The fields of a model call beside its messages; None (or empty) sends nothing, and for an API client's
    settings means "the agent's own"."""

    tools: Sequence[Mapping[str, Any]] = ()  # OpenAI function tools (a client's: the tools it runs)
    tool_choice: Any = None  # "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}
    response_format: Mapping[str, Any] | None = None  # {"type": "json_object"} or {"type": "json_schema", ...}
    max_tokens: int | None = None  # a turn's requests send it within the agent's longest reply (agents.modelcall)
    temperature: float | None = None
    top_p: float | None = None
    stop: Sequence[str] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        # Frozen all the way down: a list given is kept as a tuple.
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def tool_names(self) -> frozenset[str]:
        """The names of the tools."""
        return frozenset(str(tool["function"]["name"]) for tool in self.tools)

    @property
    def wants_json(self) -> bool:
        """The reply must be a JSON object (json_object or json_schema)."""
        return self.response_format is not None and self.response_format.get("type") in ("json_object", "json_schema")

    @property
    def json_schema(self) -> Mapping[str, Any] | None:
        """The schema the reply must follow (json_schema), else None."""
        if self.response_format is None or self.response_format.get("type") != "json_schema":
            return None
        schema = (self.response_format.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, Mapping) else None

    def reply_problem(self, text: str) -> str:
        """What keeps `text` from being the JSON reply asked for ("" when it is one), worded for the model."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            return f"it is not valid JSON ({exc})."
        if not isinstance(value, dict):
            return "it must be a JSON object."
        schema = self.json_schema
        if schema is None:
            return ""
        error = jsonschema.exceptions.best_match(jsonschema.validators.validator_for(schema)(schema).iter_errors(value))
        if error is None:
            return ""
        where = "/".join(str(part) for part in error.absolute_path) or "the top level"
        return f"it does not match the JSON schema at {where}: {error.message}."


@dataclass(frozen=True, kw_only=True)
class ChatRequest(CallOptions):
    """One model call's request: its messages and the fields beside them (CallOptions'), plus `extra_body`, fields
    a compatible server takes beyond OpenAI's, sent as they are."""

    messages: Sequence[ChatMessage]
    extra_body: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "messages", tuple(self.messages))

    @classmethod
    def asking(cls, options: CallOptions | None, *, messages: Sequence[ChatMessage], **changes: Any) -> ChatRequest:
        """A request of `messages` with what `options` ask (None: nothing), `changes` over them."""
        asked = {f.name: getattr(options, f.name) for f in fields(CallOptions)} if options is not None else {}
        return cls(**{**asked, **changes}, messages=messages)

    def within(self, cap: int | None) -> ChatRequest:
        """This request with a reply of at most `cap` tokens: the smaller of its own max_tokens and the cap, the cap
        when it asks none (None: no cap, the request as it is)."""
        if cap is None or (self.max_tokens is not None and self.max_tokens <= cap):
            return self
        return replace(self, max_tokens=cap)

    def wire_params(self) -> dict[str, Any]:
        """The request body's fields but the model (`extra_body` kept apart, for the transport to merge)."""
        params: dict[str, Any] = {"messages": wire(self.messages)}
        if self.tools:
            params["tools"] = list(self.tools)
            if self.tool_choice is not None:
                params["tool_choice"] = self.tool_choice
        optional = {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "top_p": self.top_p,
            "seed": self.seed,
        }
        params.update((name, value) for name, value in optional.items() if value is not None)
        if self.stop:
            params["stop"] = list(self.stop)
        if self.response_format is not None:
            params["response_format"] = dict(self.response_format)
        if self.extra_body:
            params["extra_body"] = dict(self.extra_body)
        return params

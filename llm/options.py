"""What a caller asks of the model beyond the messages: the OpenAI chat-completions fields an API client may set
(sampling, length, output format) and the tools it runs itself.

`CallOptions` travels from the OpenAI-compatible endpoint through the turn to `llm.client.stream_chat`, which adds
`params()` to the request. The tool loop offers `tools` beside the agent's own and hands their calls back to the
client instead of running them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema


@dataclass(frozen=True)
class CallOptions:
    """A client's settings for one turn; None (or empty) means "the agent's own"."""

    tools: tuple[Mapping[str, Any], ...] = ()  # OpenAI function tools the client runs
    tool_choice: Any = None  # "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}
    response_format: Mapping[str, Any] | None = None  # {"type": "json_object"} or {"type": "json_schema", ...}
    max_tokens: int | None = None  # as asked; the turn sends it within the agent's longest reply (AgentConfig)
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None

    @property
    def tool_names(self) -> frozenset[str]:
        """The names of the client's tools."""
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

    def params(self) -> dict[str, Any]:
        """The request fields these options add (temperature and max_tokens are merged by the caller)."""
        params: dict[str, Any] = {}
        if self.top_p is not None:
            params["top_p"] = self.top_p
        if self.stop:
            params["stop"] = list(self.stop)
        if self.seed is not None:
            params["seed"] = self.seed
        if self.response_format is not None:
            params["response_format"] = dict(self.response_format)
        return params

"""A chat/completions request of the OpenAI-compatible endpoint, read and checked (docs/api.md lists each field:
honoured, passed through, or refused). Every refusal is an `ApiError` naming the field (`param`) that is wrong."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from django.http import JsonResponse
from django.utils.translation import gettext as _

from agents.models import MAX_REPLY_TOKENS
from api.openai_parts import Content, FilePart, PartError, read_content
from core.bounded import loads_json, unstorable_at, unstorable_message
from llm.messages import ChatMessage, Role
from llm.options import CallOptions

MAX_MESSAGES = 500
MAX_CONTENT_CHARS = 20_000
MAX_CLIENT_ID_CHARS = 100
MAX_TOOLS = 128
MAX_TOOL_DESCRIPTION_CHARS = 10_000
# A client's JSON schema (a tool's parameters, response_format's schema): its size as JSON and its nesting, bounded
# before jsonschema reads it (which recurses once per level) and before every model call of the turn carries it.
MAX_SCHEMA_CHARS = 32_000
MAX_SCHEMA_DEPTH = 32
MAX_TOOLS_CHARS = 200_000  # all the tools together, as JSON
MAX_STOPS = 4
MAX_CHOICES = 128  # OpenAI's largest `n`; above 1 is refused all the same, with its own reason
MAX_STOP_CHARS = 256
# Signed 64-bit, OpenAI's range for `seed` and the largest id the database stores.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The roles a client may send; `developer` is OpenAI's newer name for `system`.
CLIENT_ROLES = {"system", "developer", "user", "assistant", "tool"}
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for function and schema names; used with fullmatch
TOOL_CHOICES = ("none", "auto", "required")


class ApiError(Exception):
    """An answer in OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self, status: int, message: str, *, code: str, kind: str = "invalid_request_error", param: str | None = None,
        retry_after: float | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.code, self.kind, self.param = status, message, code, kind, param
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def response(self) -> JsonResponse:
        response = JsonResponse(self.body(), status=self.status, json_dumps_params={"ensure_ascii": False})
        if self.retry_after is not None:
            response["Retry-After"] = str(max(1, round(self.retry_after)))
        return response


@dataclass
class CompletionRequest:
    model: str
    history: list[ChatMessage]  # the messages before the last user message; system messages left out
    content: str  # the last user message
    stream: bool
    include_usage: bool
    conversation_id: int | None
    client_id: str | None
    # After the last user message: the client's own tool round (the assistant's calls of its tools, their results).
    tool_round: list[ChatMessage] = field(default_factory=list)
    options: CallOptions = field(default_factory=CallOptions)
    # The last user message's files (image_url and file parts), fetched and read by the door (api.openai_compat).
    files: list[FilePart] = field(default_factory=list)


def _content(content: Any, n: int, role: Any, last_user: bool) -> Content:
    """messages[n].content read (api.openai_parts): its text, and the last user message's files."""
    try:
        return read_content(content, n, role=role, last_user=last_user)
    except PartError as exc:
        raise ApiError(exc.status, exc.message, code=exc.code, param=exc.param) from None


def _positive_int(value: Any) -> int | None:
    """A positive id the database can hold (signed 64-bit), given as a number or a string of digits; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and 0 < value <= INT64_MAX else None


# --- messages ---------------------------------------------------------------------------------------------------


def _tool_calls(raw: Any, n: int) -> list[dict[str, Any]]:
    """An assistant message's `tool_calls`, in the one OpenAI form."""
    where = f"messages[{n}].tool_calls"
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, _("%(field)s must be a non-empty list.") % {"field": where}, code="invalid_type",
                       param=where)  # fmt: skip
    calls = []
    for call in raw:
        function = call.get("function") if isinstance(call, dict) else None
        ok = isinstance(function, dict) and isinstance(call.get("id"), str) and call["id"]
        if not ok or not isinstance(function.get("name"), str) or not isinstance(function.get("arguments", ""), str):
            raise ApiError(
                400, _("Each of %(field)s needs an id and a function with a name and its arguments (a JSON string).")
                % {"field": where}, code="invalid_tool_call", param=where,
            )  # fmt: skip
        calls.append(
            {"id": call["id"], "type": "function",
             "function": {"name": function["name"], "arguments": function.get("arguments") or ""}}
        )  # fmt: skip
    return calls


def _all_answered(open_calls: set[str], n: int) -> None:
    """Every call of the last assistant message has its tool message before messages[n]."""
    if open_calls:
        raise ApiError(400, _("Give each tool call its result (a tool message) before messages[%(n)s]: %(ids)s has "
                              "none.") % {"n": n, "ids": ", ".join(sorted(open_calls))},
                       code="invalid_tool_call_id", param=f"messages[{n}]")  # fmt: skip


def _message(raw: Any, n: int, open_calls: set[str], files: list[FilePart] | None = None) -> ChatMessage:
    """One message of `messages` as a ChatMessage; `open_calls` holds the ids of the calls a tool message may
    answer (the last assistant's), and loses each one answered. `files`, given for the last user message only,
    receives its files."""
    if not isinstance(raw, dict) or raw.get("role") not in CLIENT_ROLES:
        raise ApiError(400, _("messages[%(n)s].role must be one of system, user, assistant, tool.") % {"n": n},
                       code="invalid_role", param=f"messages[{n}].role")  # fmt: skip
    content = _content(raw.get("content"), n, raw["role"], last_user=files is not None)
    role, text = raw["role"], content.text
    if files is not None:
        files.extend(content.files)
    if len(text) > MAX_CONTENT_CHARS:
        raise ApiError(
            400, _("messages[%(n)s] is longer than %(max)s characters.") % {"n": n, "max": MAX_CONTENT_CHARS},
            code="message_too_long", param=f"messages[{n}].content",
        )  # fmt: skip
    if role == Role.TOOL:
        call_id = raw.get("tool_call_id")
        if not isinstance(call_id, str) or call_id not in open_calls:
            raise ApiError(400, _("messages[%(n)s] answers no tool call of the assistant message before it: give "
                                  "the tool_call_id of one of its tool_calls.") % {"n": n},
                           code="invalid_tool_call_id", param=f"messages[{n}].tool_call_id")  # fmt: skip
        open_calls.discard(call_id)
        return ChatMessage.tool(call_id, text)
    _all_answered(open_calls, n)
    if role == Role.ASSISTANT and raw.get("tool_calls"):
        calls = _tool_calls(raw["tool_calls"], n)
        open_calls.update(call["id"] for call in calls)
        return ChatMessage.assistant(text, tool_calls=calls)
    return ChatMessage(Role.SYSTEM if role == "developer" else role, text)


def _messages(raw: Any) -> tuple[list[ChatMessage], str, list[ChatMessage], list[FilePart]]:
    """The history before the last user message (system messages left out: the agent's own prompt leads), that
    message's text, the client's tool round after it, and that message's files."""
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, _("“messages” must be a non-empty list."), code="invalid_messages", param="messages")
    if len(raw) > MAX_MESSAGES:
        raise ApiError(400, _("Send at most %(n)s messages.") % {"n": MAX_MESSAGES}, code="too_many_messages",
                       param="messages")  # fmt: skip
    open_calls: set[str] = set()
    last_raw = max((n for n, message in enumerate(raw) if isinstance(message, dict) and message.get("role") == "user"),
                   default=-1)  # fmt: skip
    files: list[FilePart] = []
    messages = [_message(message, n, open_calls, files if n == last_raw else None) for n, message in enumerate(raw)]
    _all_answered(open_calls, len(messages))
    last_user = max((n for n, message in enumerate(messages) if message.role == Role.USER), default=-1)
    tail = messages[last_user + 1 :]
    round_ok = not tail or (tail[0].tool_calls is not None and tail[-1].role == Role.TOOL)
    # An empty last user message is the engine's admission's refusal (empty_message), as on every surface.
    if last_user < 0 or not round_ok:
        raise ApiError(400, _("The last message must be the user's, or the results of your tools after the "
                              "assistant's tool calls."), code="invalid_messages",
                       param=f"messages[{len(messages) - 1}]")  # fmt: skip
    if any(message.role == Role.SYSTEM for message in tail):
        raise ApiError(400, _("Only tool calls and their results may follow the last user message."),
                       code="invalid_messages", param="messages")  # fmt: skip
    history = [message for message in messages[:last_user] if message.role != Role.SYSTEM]
    return history, messages[last_user].text, tail, files


# --- the model's options ----------------------------------------------------------------------------------------


def _refuse(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, code=code, param=param)


def _number(data: Mapping[str, Any], name: str, low: float, high: float) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not (low <= value <= high)
    ):
        raise _refuse(name, _("“%(field)s” must be a number from %(low)s to %(high)s.")
                      % {"field": name, "low": low, "high": high})  # fmt: skip
    return float(value)


def _whole(data: Mapping[str, Any], name: str, low: int, high: int) -> int | None:
    value = data.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
        raise _refuse(name, _("“%(field)s” must be a whole number from %(low)s to %(high)s.")
                      % {"field": name, "low": low, "high": high})  # fmt: skip
    return value


def _max_tokens(data: Mapping[str, Any]) -> int | None:
    """The longest reply asked for, at most the longest an agent may be set to write (MAX_REPLY_TOKENS)."""
    asked = _whole(data, "max_tokens", 1, MAX_REPLY_TOKENS)
    completion = _whole(data, "max_completion_tokens", 1, MAX_REPLY_TOKENS)
    return completion if completion is not None else asked


def _too_long(field: str, limit: int) -> str:
    return _("%(field)s is longer than %(max)s characters.") % {"field": field, "max": limit}


def _stop(value: Any) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else value
    if value is None:
        return ()
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
        raise _refuse("stop", _("“stop” must be a string or a list of at most %(n)s strings.") % {"n": MAX_STOPS})
    for n, stop in enumerate(stops):
        if len(stop) > MAX_STOP_CHARS:
            raise _refuse("stop", _too_long(f"stop[{n}]" if isinstance(value, list) else "stop", MAX_STOP_CHARS))
    return tuple(stops)


def _json_depth(value: Any) -> int:
    """How deep `value` nests lists and objects (a scalar: 0), walked without recursion; the walk stops once past
    MAX_SCHEMA_DEPTH."""
    deepest, pending = 0, [(value, 1)]
    while pending and deepest <= MAX_SCHEMA_DEPTH:
        item, level = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, level)
            pending.extend((child, level + 1) for child in children)
    return deepest


def _json_size(value: Any, param: str, limit: int) -> int:
    """The characters of `value` as JSON; a refusal naming `param` above `limit`. Call on a depth-checked value."""
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    if size > limit:
        raise _refuse(param, _("%(field)s is %(size)s characters of JSON; at most %(max)s are allowed.")
                      % {"field": param, "size": size, "max": limit}, code="too_large")  # fmt: skip
    return size


def _schema(schema: Mapping[str, Any], param: str) -> None:
    """A client's JSON schema: nested at most MAX_SCHEMA_DEPTH levels, at most MAX_SCHEMA_CHARS as JSON, and a valid
    schema of its draft; a refusal naming `param` otherwise."""
    if _json_depth(schema) > MAX_SCHEMA_DEPTH:
        raise _refuse(param, _("%(field)s nests more than %(depth)s levels deep: flatten the schema.")
                      % {"field": param, "depth": MAX_SCHEMA_DEPTH}, code="too_large")  # fmt: skip
    _json_size(schema, param, MAX_SCHEMA_CHARS)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise _refuse(param, _("The JSON schema is not valid: %(error)s") % {"error": exc.message},
                      code="invalid_schema") from None  # fmt: skip


def _response_format(value: Any) -> Mapping[str, Any] | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise _refuse("response_format", _("“response_format.type” must be text, json_object or json_schema."))
    if kind == "text":
        return None
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict) or not isinstance(spec.get("name"), str):
            raise _refuse("response_format.json_schema",
                          _("“response_format.json_schema” needs a “name” and a “schema” object."))  # fmt: skip
        if not TOOL_NAME.fullmatch(spec["name"]):
            raise _refuse("response_format.json_schema.name", _("The schema's “name” must be 1 to 64 letters, digits, "
                                                                "_ or -."))  # fmt: skip
        _schema(schema, "response_format.json_schema.schema")
    return value


def _tool(tool: Any, n: int, names: set[str]) -> dict[str, Any]:
    """tools[n] as the one OpenAI form, its name not among `names`, its description and parameters bounded."""
    function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else None
    parameters = function.get("parameters", {"type": "object", "properties": {}}) if function else None
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name) or name in names or not isinstance(parameters, dict):
        raise _refuse(f"tools[{n}]", _("tools[%(n)s] must be a function tool with a unique name (letters, digits, "
                                       "_ and -, at most 64) and “parameters” as a JSON schema object.")
                      % {"n": n})  # fmt: skip
    _schema(parameters, f"tools[{n}].function.parameters")
    spec = {"name": name, "parameters": parameters}
    if isinstance(function.get("description"), str):
        if len(function["description"]) > MAX_TOOL_DESCRIPTION_CHARS:
            where = f"tools[{n}].function.description"
            raise _refuse(where, _too_long(where, MAX_TOOL_DESCRIPTION_CHARS))
        spec["description"] = function["description"]
    if isinstance(function.get("strict"), bool):
        spec["strict"] = function["strict"]
    return {"type": "function", "function": spec}


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise _refuse("tools", _("“tools” must be a list of at most %(n)s function tools.") % {"n": MAX_TOOLS})
    tools: list[dict[str, Any]] = []
    names: set[str] = set()
    for n, tool in enumerate(value):
        tools.append(_tool(tool, n, names))
        names.add(tools[-1]["function"]["name"])
    _json_size(tools, "tools", MAX_TOOLS_CHARS)
    return tuple(tools)


def _tool_choice(value: Any, tools: tuple[dict[str, Any], ...]) -> Any:
    if value is None:
        return None
    names = {tool["function"]["name"] for tool in tools}
    if isinstance(value, dict):
        named = (value.get("function") or {}).get("name") if value.get("type") == "function" else None
        if named in names:
            return {"type": "function", "function": {"name": named}}
    elif value in TOOL_CHOICES and (tools or value != "required"):
        return value
    raise _refuse("tool_choice", _("“tool_choice” must be none, auto, required or one of the functions in “tools”."))


def _options(data: Mapping[str, Any]) -> CallOptions:
    """The fields passed to the model; `n` above 1 is refused (one choice per request)."""
    n = _whole(data, "n", 1, MAX_CHOICES)
    if n is not None and n > 1:
        raise _refuse("n", _("Only one choice per request is supported (n=1): send %(n)s requests instead.")
                      % {"n": n}, code="unsupported_value")  # fmt: skip
    tools = _tools(data.get("tools"))
    return CallOptions(
        tools=tools,
        tool_choice=_tool_choice(data.get("tool_choice"), tools),
        response_format=_response_format(data.get("response_format")),
        max_tokens=_max_tokens(data),
        temperature=_number(data, "temperature", 0, 2),
        top_p=_number(data, "top_p", 0, 1),
        stop=_stop(data.get("stop")),
        seed=_whole(data, "seed", INT64_MIN, INT64_MAX),
    )


# --- the whole request ------------------------------------------------------------------------------------------


def _body(raw: bytes) -> dict[str, Any]:
    try:
        data = loads_json(raw or b"")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, _("The request body is not valid JSON."), code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, _("The request body must be a JSON object."), code="invalid_json")
    if (where := unstorable_at(data)) is not None:
        raise ApiError(400, unstorable_message(where), code="invalid_characters", param=where)
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise ApiError(400, _("Name the agent in “model” (GET /v1/models lists them)."), code="missing_model",
                       param="model")  # fmt: skip
    return data


def _ids(data: Mapping[str, Any], headers: Any) -> tuple[int | None, str | None]:
    """The conversation to continue and the idempotency key, from the headers or `metadata`."""
    metadata = data.get("metadata") or {}
    raw_conversation = headers.get("X-Conversation-Id") or metadata.get("conversation_id")
    conversation_id = _positive_int(raw_conversation) if raw_conversation not in (None, "") else None
    if raw_conversation not in (None, "") and conversation_id is None:
        raise ApiError(400, _("The conversation id must be a positive integer."), code="invalid_conversation",
                       param="metadata.conversation_id")  # fmt: skip
    client_id = headers.get("Idempotency-Key") or metadata.get("client_id")
    if client_id is not None and (not isinstance(client_id, str) or not 0 < len(client_id) <= MAX_CLIENT_ID_CHARS):
        raise ApiError(400, _("The idempotency key must be a string of at most %(n)s characters.")
                       % {"n": MAX_CLIENT_ID_CHARS}, code="invalid_client_id")  # fmt: skip
    return conversation_id, client_id


def parse_completion_request(raw: bytes, headers: Any) -> CompletionRequest:
    """Read and check a chat/completions body; ApiError (400) names the field that is wrong. Fields this endpoint
    does not know are ignored, as OpenAI's own API does."""
    data = _body(raw)
    stream, options, metadata = data.get("stream", False), data.get("stream_options") or {}, data.get("metadata") or {}
    if not isinstance(stream, bool) or not isinstance(options, dict) or not isinstance(metadata, dict):
        raise ApiError(400, _("“stream” must be true or false; “stream_options” and “metadata” objects."),
                       code="invalid_type")  # fmt: skip
    history, content, tool_round, files = _messages(data.get("messages"))
    conversation_id, client_id = _ids(data, headers)
    if tool_round and conversation_id is not None:
        raise ApiError(400, _("Send your tools' results with the whole history, without a conversation id."),
                       code="unsupported_value", param="metadata.conversation_id")  # fmt: skip
    return CompletionRequest(
        model=data["model"].strip(),
        history=history,
        content=content,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        conversation_id=conversation_id,
        client_id=client_id,
        tool_round=tool_round,
        options=_options(data),
        files=files,
    )

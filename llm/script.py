"""The script engine of the scripted model: one implementation behind the fake OpenAI server and the demo provider.

A script is a list of rules; the first rule whose `when` matches the request (and has uses left) answers it.
```yaml
defaults: {delay: 0.02, chunk_size: 0}      # seconds between chunks; 0 = one token per chunk, N = N characters
models: [scripted]                          # what /v1/models lists
rules:
  - name: weather
    when: {last_message: "weather", has_tool_results: false}     # also: last_role, system_prompt, model, has_tools
    reply: {tool_calls: [{name: get_weather, arguments: {city: "Paris"}}]}
  - when: {has_tool_results: true}
    reply: {text: "It is sunny. You said: {last_message}"}
  - when: {last_message: {regex: "^retry"}}
    times: 1                                # used once, then the next matching rule answers
    reply: {error: {status: 429, retry_after: 0.01}}
```
Conditions also: last_user_message, and names_tool (true: the user's last message names one of the offered tools,
by its name, a label or words of its description, llm/script_tools.py; the engine's `labels` give the labels).
Reply keys: text, text_tokens (a generated text of exactly N tokens), tool_calls, call_named_tool (true: call the
tool the message names), finish_reason, delay, first_delay, chunk_size, stall (seconds before the response starts:
a timeout), drop_after (chunks, then the connection drops), malformed_tool_json, usage (false: no usage chunk even
when asked for), interleave_tool_calls, raw (true: answer as written, none of the conventions below), error
{status, message, code, type, retry_after}. Text may use {last_message}, {system_prompt} and {model}.

Conventions every script follows (as a real model would), unless the rule says `raw: true`:
- a request that forces a tool (a named function as `tool_choice`; "required": the tool the message names, else the
  first), or whose last message is the user's and says "use the tool NAME" / "call the tool NAME" for an offered
  tool, gets a call of that tool; its arguments follow the tool's JSON schema, each property read from the message
  ("property: value", an enum value it mentions, a number it gives; script_tools.tool_arguments);
- `tool_choice` "none": a rule that calls tools does not answer, the next one does;
- `response_format` json_schema gets a JSON object of that schema (filled the same way), json_object a JSON object
  that fits the request (the keys it asks for, the tool result, its "key: value" pairs; else {"reply": text};
  script_tools.json_object_for);
- `max_tokens` cuts the text to that many tokens (finish_reason "length"); `stop` cuts it before the first stop
  sequence.
The named groups of a `regex` condition (`(?P<dish>...)`) can be used as {dish} in the text and in tool-call
arguments; an argument that is exactly "{name:int}" becomes the group as a number ("3", "两" -> 2).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llm import tokens
from llm.messages import ChatMessage
from llm.script_tools import ToolLabels, json_object_for, named_tool, offered_tools, schema_value, tool_arguments

DEFAULT_MODEL = "scripted"


class StreamDropped(ConnectionResetError):
    """The script asked for the stream to break here (the HTTP server drops the connection instead)."""


@dataclass
class ErrorPlan:
    """Answer with an HTTP error (an OpenAI-style error body)."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    stall: float = 0.0


@dataclass
class ReplyPlan:
    """Answer with a completion: `chunks` when streaming, `completion` otherwise."""

    chunks: list[dict[str, Any]]
    completion: dict[str, Any]
    delay: float = 0.0
    first_delay: float = 0.0
    stall: float = 0.0
    drop_after: int | None = None

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        """The chunks with the script's delays; raises StreamDropped where the script drops the stream."""
        if self.stall:
            await asyncio.sleep(self.stall)
        for number, chunk in enumerate(self.chunks):
            if self.drop_after is not None and number >= self.drop_after:
                raise StreamDropped("scripted drop")
            if number == 1 and self.first_delay:
                await asyncio.sleep(self.first_delay)
            elif number > 1 and self.delay:
                await asyncio.sleep(self.delay)
            yield chunk


def _last_user_index(messages: list[Mapping[str, Any]]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return -1


def _text(content: Any) -> str:
    return tokens._content_text(content)


def _matches_text(condition: Any, text: str) -> bool:
    if isinstance(condition, str):
        return condition.lower() in text.lower()
    if isinstance(condition, Mapping):
        if "equals" in condition and text.strip() != condition["equals"]:
            return False
        if "contains" in condition and str(condition["contains"]).lower() not in text.lower():
            return False
        if "regex" in condition and not re.search(condition["regex"], text, re.IGNORECASE | re.DOTALL):
            return False
        return "any" not in condition or any(str(word).lower() in text.lower() for word in condition["any"])
    return bool(condition) == bool(text)


_CHINESE_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}


def _number(text: str) -> int | str:
    """A captured number as an int: digits or a Chinese numeral up to 99; anything else stays text."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if text and all(c in _CHINESE_DIGITS or c == "十" for c in text) and text.count("十") <= 1:
        if "十" not in text:
            return _CHINESE_DIGITS[text] if len(text) == 1 else text
        tens, _sep, ones = text.partition("十")
        if len(tens) > 1 or len(ones) > 1:
            return text
        return (_CHINESE_DIGITS[tens] if tens else 1) * 10 + (_CHINESE_DIGITS[ones] if ones else 0)
    return text


def _fill_arguments(value: Any, captures: Mapping[str, str]) -> Any:
    """Tool-call arguments with the rule's captured groups filled in ({name}, or "{name:int}" for a number)."""
    if isinstance(value, str):
        whole = re.fullmatch(r"\{(\w+):int\}", value)
        if whole and whole.group(1) in captures:
            return _number(captures[whole.group(1)])
        for name, captured in captures.items():
            value = value.replace("{" + name + "}", captured)
        return value
    if isinstance(value, Mapping):
        return {key: _fill_arguments(item, captures) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill_arguments(item, captures) for item in value]
    return value


@dataclass
class Rule:
    """One rule of a script: when it applies, what it answers, how often."""

    when: dict[str, Any]
    reply: dict[str, Any]
    name: str = ""
    times: int | None = None
    used: int = 0

    def matches(self, request: Mapping[str, Any], named: str | None = None) -> bool:
        """Whether the rule answers `request`; `named` is the offered tool the user's last message names."""
        if not self._may_answer(request, named):
            return False
        messages = list(request.get("messages") or [])
        last = messages[-1] if messages else {}
        after_user = messages[_last_user_index(messages) + 1 :]
        system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
        for key, condition in self.when.items():
            if key == "last_message" and not _matches_text(condition, _text(last.get("content"))):
                return False
            if key == "last_user_message":
                users = [m for m in messages if m.get("role") == "user"]
                if not _matches_text(condition, _text(users[-1].get("content")) if users else ""):
                    return False
            if key == "last_role" and last.get("role") != condition:
                return False
            if key == "has_tool_results" and any(m.get("role") == "tool" for m in after_user) != bool(condition):
                return False
            if key == "system_prompt" and not _matches_text(condition, system):
                return False
            if key == "model" and request.get("model") != condition:
                return False
            if key == "has_tools" and bool(request.get("tools")) != bool(condition):
                return False
        return True

    def _may_answer(self, request: Mapping[str, Any], named: str | None) -> bool:
        """The rule has uses left, calls no tool when the request allows none, and names a tool if it needs one."""
        if self.times is not None and self.used >= self.times:
            return False
        if self.reply.get("tool_calls") and request.get("tool_choice") == "none" and not self.reply.get("raw"):
            return False  # the request allows no tool call: the next rule answers, as a model would in words
        return "names_tool" not in self.when or bool(named) == bool(self.when["names_tool"])

    def captures(self, request: Mapping[str, Any]) -> dict[str, str]:
        """The named groups of the rule's regex conditions, matched against the request."""
        messages = list(request.get("messages") or [])
        users = [m for m in messages if m.get("role") == "user"]
        texts = {
            "last_message": _text(messages[-1].get("content")) if messages else "",
            "last_user_message": _text(users[-1].get("content")) if users else "",
            "system_prompt": "\n".join(
                _text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
            ),
        }
        found: dict[str, str] = {}
        for key, text in texts.items():
            condition = self.when.get(key)
            if isinstance(condition, Mapping) and "regex" in condition:
                match = re.search(condition["regex"], text, re.IGNORECASE | re.DOTALL)
                if match:
                    found.update({name: value for name, value in match.groupdict().items() if value is not None})
        return found


_FILLER_WORDS = [
    "the",
    "a",
    "model",
    "reply",
    "is",
    "streamed",
    "in",
    "small",
    "pieces",
    "so",
    "that",
    "the",
    "gateway",
    "can",
    "be",
    "measured",
    "fairly",
]


def text_of_tokens(count: int, model: str = "gpt-4") -> str:
    """A deterministic English text of exactly `count` tokens (for benchmarks and long replies)."""
    # Each " word" of the filler is a single cl100k token, so the text grows one token per word.
    words = [f" {_FILLER_WORDS[i % len(_FILLER_WORDS)]}" for i in range(count)]
    text = "".join(words)
    while tokens.count_text(text, model) > count:
        text = text[: text.rfind(" ")]
    return text


def split_text(text: str, chunk_size: int, model: str) -> list[str]:
    """Pieces of `text` as a server would stream them: N characters, or (chunk_size 0) one token at a time."""
    if not text:
        return []
    if chunk_size > 0:
        return [text[i : i + chunk_size] for i in range(0, len(text), chunk_size)]
    encoding = tokens.encoding_for_model(model)
    pieces: list[str] = []
    pending = b""
    for token_bytes in encoding.decode_tokens_bytes(encoding.encode(text, disallowed_special=())):
        pending += token_bytes
        try:
            pieces.append(pending.decode())
        except UnicodeDecodeError:
            continue  # a multi-byte character split across tokens: send it whole with the next token
        pending = b""
    if pending:
        pieces.append(pending.decode(errors="replace"))
    return pieces


def _substitute(text: str, request: Mapping[str, Any], captures: Mapping[str, str] | None = None) -> str:
    messages = list(request.get("messages") or [])
    last = _text(messages[-1].get("content")) if messages else ""
    system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    for name, captured in (captures or {}).items():
        text = text.replace("{" + name + "}", captured)
    return (
        text.replace("{last_message}", last)
        .replace("{system_prompt}", system)
        .replace("{model}", str(request.get("model")))
    )


_USE_TOOL = re.compile(r"\b(?:use|call)\s+(?:the\s+)?tool\s+[`'\"“]?(?P<name>[\w.-]+)", re.IGNORECASE)


def _forced_tool(request: Mapping[str, Any], offered: Mapping[str, Any], text: str, named: str | None) -> str | None:
    """The tool the request forces: the named function of `tool_choice`; with "required", the one the message
    names (`named`), else the first; the one the message asks for by "use the tool NAME"."""
    choice = request.get("tool_choice")
    if choice == "none":
        return None
    if isinstance(choice, Mapping):
        return (choice.get("function") or {}).get("name")
    asked = next((m.group("name") for m in _USE_TOOL.finditer(text) if m.group("name") in offered), None)
    if asked is None and choice == "required" and offered:
        return named or next(iter(offered))
    return asked


def with_conventions(request: Mapping[str, Any], reply: Mapping[str, Any], named: str | None = None) -> dict[str, Any]:
    """The reply as the conventions of the module docstring change it (client tools, response_format); `named` is
    the offered tool the user's last message names (script_tools.named_tool), for `call_named_tool` and "required"."""
    reply = dict(reply)
    if reply.get("raw"):
        return reply
    messages = list(request.get("messages") or [])
    last = messages[-1] if messages else {}
    offered = offered_tools(request)
    if offered and last.get("role") == "user":
        text = _text(last.get("content"))
        name = _forced_tool(request, offered, text, named)
        if name not in offered and reply.get("call_named_tool") and request.get("tool_choice") != "none":
            name = named
        if name in offered:
            arguments = tool_arguments(offered[name].get("parameters") or {}, text)
            return {**reply, "text": "", "text_tokens": 0, "tool_calls": [{"name": name, "arguments": arguments}]}
    if reply.get("tool_calls"):
        return reply
    response_format = request.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema") or {}
        users = [m for m in messages if m.get("role") == "user"]
        value = schema_value(schema, _text(users[-1].get("content")) if users else "")
        reply["text"] = json.dumps(value, ensure_ascii=False)
    elif response_format.get("type") == "json_object":
        reply["json_object"] = True
    return reply


def _json_object_text(text: str, request: Mapping[str, Any]) -> str:
    """The reply of a json_object request: a JSON object that fits it (script_tools.json_object_for), read from the
    system prompt, the user's last message and the tool result that came after it."""
    messages = list(request.get("messages") or [])
    index = _last_user_index(messages)
    message = _text(messages[index].get("content")) if index >= 0 else ""
    system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    results = [_text(m.get("content")) for m in messages[index + 1 :] if m.get("role") == "tool"]
    value = json_object_for(
        instructions=f"{system}\n{message}", message=message, answer=text, tool_result=results[-1] if results else None
    )
    return json.dumps(value, ensure_ascii=False)


def limited(text: str, request: Mapping[str, Any], model: str) -> tuple[str, str | None]:
    """The text cut before the request's first stop sequence and to its max_tokens; the finish reason a cut gives
    ("length"), or None."""
    stops = request.get("stop") or []
    for stop in [stops] if isinstance(stops, str) else stops:
        if stop and stop in text:
            text = text[: text.index(stop)]
    limit = request.get("max_completion_tokens") or request.get("max_tokens")
    if isinstance(limit, int) and limit > 0:
        encoding = tokens.encoding_for_model(model)
        encoded = encoding.encode(text, disallowed_special=())
        if len(encoded) > limit:
            return encoding.decode(encoded[:limit]), "length"
    return text, None


class ScriptEngine:
    """Answers chat requests from a script. Thread-safe: the rule counters are shared by concurrent requests."""

    def __init__(self, script: Mapping[str, Any] | None = None, *, labels: ToolLabels | None = None) -> None:
        self._lock = threading.Lock()
        # The labels people call tools by, beside their names (the demo model is given the agents', llm.demo).
        self.labels = labels
        self.load(script or {"rules": []})

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptEngine:
        return cls(load_script(path))

    def load(self, script: Mapping[str, Any]) -> None:
        """Replace the script (and reset every rule's counter)."""
        rules = [
            Rule(
                when=dict(r.get("when") or {}),
                reply=dict(r.get("reply") or {}),
                name=r.get("name", ""),
                times=r.get("times"),
            )
            for r in script.get("rules") or []
        ]
        with self._lock:
            self.script = dict(script)
            self.defaults = dict(script.get("defaults") or {})
            self.rules = rules

    @property
    def models(self) -> list[str]:
        return list(self.script.get("models") or [DEFAULT_MODEL])

    def named(self, request: Mapping[str, Any]) -> str | None:
        """The offered tool the request's last message, the user's, names (None: none, or tool_choice "none")."""
        offered = offered_tools(request)
        messages = list(request.get("messages") or [])
        if not offered or not messages or messages[-1].get("role") != "user" or request.get("tool_choice") == "none":
            return None
        return named_tool(_text(messages[-1].get("content")), offered, self.labels)

    def _choose(self, request: Mapping[str, Any], named: str | None) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(request, named):
                    rule.used += 1
                    return rule
        return None

    def plan(self, request: Mapping[str, Any]) -> ErrorPlan | ReplyPlan:
        """How to answer `request` (an OpenAI chat-completions body)."""
        named = self.named(request)
        rule = self._choose(request, named)
        captures: dict[str, str] = {}
        if rule is None:
            reply: dict[str, Any] = {"text": self.script.get("fallback", "(no rule of the script matched)")}
        else:
            reply = {**self.defaults, **rule.reply}
            captures = rule.captures(request)
        if "error" in reply:
            return self._error_plan(reply)
        return self._reply_plan(request, with_conventions(request, reply, named), captures)

    def _error_plan(self, reply: Mapping[str, Any]) -> ErrorPlan:
        error = dict(reply["error"])
        status = int(error.get("status", 500))
        headers = {}
        if error.get("retry_after") is not None:
            headers["retry-after"] = str(error["retry_after"])
        body = {
            "error": {
                "message": error.get("message", f"Scripted error {status}"),
                "type": error.get("type", "rate_limit_error" if status == 429 else "server_error"),
                "code": error.get("code"),
                "param": None,
            }
        }
        return ErrorPlan(status=status, body=body, headers=headers, stall=float(reply.get("stall", 0)))

    def _reply_plan(
        self, request: Mapping[str, Any], reply: Mapping[str, Any], captures: Mapping[str, str] | None = None
    ) -> ReplyPlan:
        model = str(request.get("model") or DEFAULT_MODEL)
        count_model = model if model != DEFAULT_MODEL else "gpt-4"
        text = _substitute(str(reply.get("text", "")), request, captures)
        if reply.get("text_tokens"):
            text = text_of_tokens(int(reply["text_tokens"]), count_model)
        if reply.get("json_object"):
            text = _json_object_text(text, request)
        text, cut = limited(text, request, count_model)
        tool_calls = []
        for number, call in enumerate(reply.get("tool_calls") or []):
            arguments = call.get("arguments", {})
            if captures:
                arguments = _fill_arguments(arguments, captures)
            arguments_json = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
            if reply.get("malformed_tool_json"):
                arguments_json = arguments_json.rstrip("}") + ', "oops": '  # cut short: not valid JSON
            call_id = call.get("id") or f"call_{uuid.uuid4().hex[:20]}_{number}"
            tool_calls.append(
                {"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": arguments_json}}
            )
        finish_reason = reply.get("finish_reason") or cut or ("tool_calls" if tool_calls else "stop")
        prompt_tokens = tokens.count_messages(request.get("messages") or [], count_model, request.get("tools"))
        completion_tokens = tokens.count_text(text, count_model) + sum(
            tokens.count_text(c["function"]["name"] + c["function"]["arguments"], count_model) for c in tool_calls
        )
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        chunk_size = int(reply.get("chunk_size", 0))
        chunks = [chunk(ChatMessage.assistant("").as_dict())]
        chunks += [chunk({"content": piece}) for piece in split_text(text, chunk_size, count_model)]
        chunks += self._tool_call_chunks(tool_calls, chunk, bool(reply.get("interleave_tool_calls")))
        chunks.append(chunk({}, finish_reason))
        stream_options = request.get("stream_options") or {}
        if stream_options.get("include_usage") and reply.get("usage", True):
            chunks.append({**chunk({}), "choices": [], "usage": usage})
        message = ChatMessage.assistant(text or None, tool_calls=tool_calls or None).as_dict()
        completion = {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }
        if reply.get("usage", True):
            completion["usage"] = usage
        drop_after = reply.get("drop_after")
        return ReplyPlan(
            chunks=chunks,
            completion=completion,
            delay=float(reply.get("delay", 0)),
            first_delay=float(reply.get("first_delay", reply.get("delay", 0))),
            stall=float(reply.get("stall", 0)),
            drop_after=int(drop_after) if drop_after is not None else None,
        )

    @staticmethod
    def _tool_call_chunks(tool_calls: list[dict[str, Any]], chunk: Any, interleave: bool) -> list[dict[str, Any]]:
        """Tool calls as servers stream them: a head (id, name) then the arguments in pieces, by index."""
        per_call: list[list[dict[str, Any]]] = []
        for index, call in enumerate(tool_calls):
            arguments = call["function"]["arguments"]
            pieces = [arguments[i : i + 8] for i in range(0, len(arguments), 8)] or [""]
            head = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            parts = [chunk({"tool_calls": [head]})]
            parts += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}) for piece in pieces]
            per_call.append(parts)
        if not interleave:
            return [part for parts in per_call for part in parts]
        merged = []
        for step in range(max((len(p) for p in per_call), default=0)):
            merged += [parts[step] for parts in per_call if step < len(parts)]
        return merged


def load_script(path: str | Path) -> dict[str, Any]:
    """A script from a YAML or JSON file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        return yaml.safe_load(text) or {}
    return json.loads(text)


def embed(text: str, dimensions: int = 64) -> list[float]:
    """A deterministic embedding: hashed character trigrams, L2-normalised (similar texts get similar vectors)."""
    vector = [0.0] * dimensions
    padded = f"  {text.lower()}  "
    for i in range(len(padded) - 2):
        digest = hashlib.blake2b(padded[i : i + 3].encode(), digest_size=8).digest()
        slot = int.from_bytes(digest[:4], "little") % dimensions
        vector[slot] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]

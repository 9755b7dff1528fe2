"""The reply inside a JSON answer, streamed as it arrives (seed 2's combined answer).

An agent whose memory extraction is `combined` asks the model for one JSON object, `{"user_reply": "...",
"new_events": [...], "relations": [...]}`: the reply and the events of the exchange in one call. The person must
see only the reply, and see it stream. `ReplyField` reads the model's text piece by piece and gives back the decoded
characters of the top-level `user_reply` string as soon as they arrive (escapes and surrogate pairs decoded across
piece boundaries); everything else (the braces, the events) is held back. A model that answers in prose instead
(its first visible character is not `{`, after an optional ```json fence) is passed through unchanged: the person
still gets the reply, and the extraction repairs or skips the events.
"""

from __future__ import annotations

import json
import re
from typing import Any

REPLY_KEY = "user_reply"


class ReplyField:
    """Feed the model's text with `feed(piece)`; each call returns what the person may see of it."""

    def __init__(self, key: str = REPLY_KEY) -> None:
        self.key = key
        self.mode = "start"  # start -> json -> value -> after, or start -> raw
        self.held = ""  # the undecided beginning (whitespace, a fence)
        self.depth = 0
        self.in_string = False
        self.string_escape = False
        self.string_chars: list[str] = []
        self.last_string: str | None = None
        self.escape = ""  # an escape of the reply value not complete yet
        self.high_surrogate = ""
        self.shown: list[str] = []

    @property
    def passthrough(self) -> bool:
        """The model did not answer JSON: its text is the reply."""
        return self.mode == "raw"

    @property
    def complete(self) -> bool:
        """The reply value was read to its closing quote."""
        return self.mode == "after"

    @property
    def text(self) -> str:
        """Everything shown so far."""
        return "".join(self.shown)

    def feed(self, piece: str) -> str:
        out: list[str] = []
        for char in piece:
            shown = self._char(char)
            if shown:
                out.append(shown)
        text = "".join(out)
        if text:
            self.shown.append(text)
        return text

    def close(self) -> str:
        """The end of the answer: what was held back and must still be shown (an answer that was only spaces)."""
        if self.mode == "start" and self.held.strip():
            self.mode = "raw"
            text, self.held = self.held, ""
            self.shown.append(text)
            return text
        return ""

    # -- the scanner ------------------------------------------------------------------------------------------

    def _char(self, char: str) -> str:
        if self.mode == "raw":
            return char
        if self.mode == "start":
            return self._start(char)
        if self.mode == "value":
            return self._value(char)
        if self.mode == "after":
            return ""
        if self.mode == "await_value":
            if char.isspace():
                return ""
            if char == '"':
                self.mode = "value"
                return ""
            self.mode = "json"  # not a string: the final parse decides
        self._structure(char)
        return ""

    def _start(self, char: str) -> str:
        self.held += char
        visible = self.held.lstrip()
        if not visible:
            return ""
        if visible.startswith("`"):
            if len(visible) < 3 and "```".startswith(visible):
                return ""
            if visible.startswith("```"):
                if "\n" not in visible:
                    return ""
                rest, self.held = visible.split("\n", 1)[1], ""  # past the fence line; decide on what follows
                return "".join(self._start(c) for c in rest)
        if visible[0] == "{":
            self.mode = "json"
            rest, self.held = visible, ""
            for c in rest:
                self._char(c)
            return ""
        self.mode = "raw"
        text, self.held = self.held, ""
        return text

    def _structure(self, char: str) -> None:
        if self.in_string:
            if self.string_escape:
                self.string_escape = False
                self.string_chars.append(char)
            elif char == "\\":
                self.string_escape = True
            elif char == '"':
                self.in_string = False
                self.last_string = "".join(self.string_chars)
            else:
                self.string_chars.append(char)
            return
        if char == '"':
            self.in_string, self.string_chars = True, []
        elif char in "{[":
            self.depth += 1
        elif char in "}]":
            self.depth -= 1
        elif char == ":" and self.depth == 1 and self.last_string == self.key:
            self.mode = "await_value"
        elif char == ",":
            self.last_string = None

    def _value(self, char: str) -> str:
        if self.escape:
            self.escape += char
            if self.escape[1] == "u" and len(self.escape) < 6:
                return ""
            escape, self.escape = self.escape, ""
            try:
                decoded = json.loads(f'"{escape}"')
            except ValueError:
                decoded = escape[1:]
            return self._decoded(decoded)
        if char == "\\":
            self.escape = char
            return ""
        if char == '"':
            self.mode = "after"
            high, self.high_surrogate = self.high_surrogate, ""
            return high
        return self._decoded(char)

    def _decoded(self, text: str) -> str:
        if len(text) == 1 and "\ud800" <= text <= "\udbff":
            self.high_surrogate = text
            return ""
        if self.high_surrogate:
            high, self.high_surrogate = self.high_surrogate, ""
            if len(text) == 1 and "\udc00" <= text <= "\udfff":
                return (high + text).encode("utf-16", "surrogatepass").decode("utf-16")
            return text  # a lone high surrogate cannot be shown
        return text


def _json_object(text: str) -> dict[str, Any] | None:
    text = (text or "").strip()
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
    if fenced:
        text = fenced.group(1)
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def reply_of(answer: str, field: ReplyField) -> str:
    """The reply of a whole answer: the `user_reply` of its JSON, else what the stream showed, else the answer."""
    data = _json_object(answer)
    if data is not None and isinstance(data.get(field.key), str):
        return data[field.key]
    if field.passthrough:
        return answer.strip()
    if field.complete:
        return field.text  # the events after it were cut off or malformed: the reply itself arrived whole
    return answer

"""Reading YAML and JSON that users send without letting their depth crash a request: Python's parsers recurse once
per nesting level, so a document of a few KB made of brackets raised RecursionError (a 500) before."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import yaml
from django import forms
from django.utils.translation import gettext as _

MAX_DEPTH = 64


class TooDeep(ValueError):
    """The document nests deeper than MAX_DEPTH; `line` is where (YAML), 1-based."""

    def __init__(self, line: int | None = None) -> None:
        self.line = line
        super().__init__(
            _("The document is nested more than %(depth)s levels deep; flatten it.") % {"depth": MAX_DEPTH}
        )


def check_yaml_depth(text: str, max_depth: int = MAX_DEPTH) -> None:
    """Raise TooDeep when `text` nests collections deeper than `max_depth` (read as a stream of events, which does not
    recurse); malformed YAML is left for the real parse to report."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > max_depth:
                    raise TooDeep(event.start_mark.line + 1 if event.start_mark else None)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return


def loads_json(text: str | bytes) -> Any:
    """json.loads, with too deep a document a ValueError (TooDeep) like any other bad JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TooDeep() from None


class BoundedJSONFormField(forms.JSONField):
    """A form's JSON field that answers too deep a document with a field error instead of a 500."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError(str(TooDeep()), code="invalid") from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return data


def unstorable(text: str) -> bool:
    """Whether `text` holds a NUL character or a lone surrogate, which PostgreSQL text and UTF-8 cannot store."""
    return "\x00" in text or any("\ud800" <= char <= "\udfff" for char in text)


def unstorable_at(value: Any, path: str = "") -> str | None:
    """Where in a parsed JSON document a string holds a NUL character or a lone surrogate (which JSON's \\u escapes
    can carry, but PostgreSQL text and UTF-8 cannot), as `messages[1].content`; None when there is none. Iterative:
    the document's depth is already bounded by loads_json, but a walk must not be what recurses."""
    pending: deque[tuple[str, Any]] = deque([(path, value)])
    while pending:
        where, item = pending.popleft()
        if isinstance(item, str):
            if unstorable(item):
                return where or "body"
        elif isinstance(item, dict):
            pending.extend((f"{where}.{key}" if where else str(key), child) for key, child in item.items())
            pending.extend((where or "body", key) for key in item)
        elif isinstance(item, list):
            pending.extend((f"{where}[{n}]", child) for n, child in enumerate(item))
    return None


def unstorable_message(where: str) -> str:
    return _("%(field)s contains a NUL character or a lone surrogate, which cannot be stored: remove it.") % {
        "field": where
    }

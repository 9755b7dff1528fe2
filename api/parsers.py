"""The API's JSON parser: too deep a document is a 400 like any other bad JSON, not a 500 (core.bounded), and so is a
string the database cannot store (a NUL character or a lone surrogate, which JSON's \\u escapes can carry)."""

from __future__ import annotations

from collections import deque
from typing import Any

from django.utils.translation import gettext as _
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from core.bounded import TooDeep


def unstorable_at(value: Any, path: str = "") -> str | None:
    """Where in a parsed JSON document a string holds a NUL character or a lone surrogate (which JSON's \\u escapes
    can carry, but PostgreSQL text and UTF-8 cannot), as `messages[1].content`; None when there is none. Iterative:
    the document's depth is already bounded by loads_json, but a walk must not be what recurses."""
    pending: deque[tuple[str, Any]] = deque([(path, value)])
    while pending:
        where, item = pending.popleft()
        if isinstance(item, str):
            if "\x00" in item or any("\ud800" <= char <= "\udfff" for char in item):
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


class BoundedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(str(TooDeep())) from None
        if (where := unstorable_at(data)) is not None:
            raise ParseError(unstorable_message(where))
        return data

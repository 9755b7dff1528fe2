"""The API's JSON parser: too deep a document is a 400 like any other bad JSON, not a 500 (core.bounded), and so is a
string the database cannot store (a NUL character or a lone surrogate, which JSON's \\u escapes can carry)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from core.bounded import TooDeep, unstorable_at, unstorable_message


class Unstorable(ParseError):
    """A body holding a string the database cannot store: its own code, as every door answers it."""

    default_code = "invalid_characters"


class BoundedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(str(TooDeep())) from None
        if (where := unstorable_at(data)) is not None:
            raise Unstorable(unstorable_message(where), code="invalid_characters")
        return data


def attachment_ids_words() -> str:
    """What a wrong "attachments" field is told, in the request's language."""
    return _("Give “attachments” as a list of file ids (POST /api/v1/attachments/ uploads a file).")


def attachment_ids(value: Any) -> list[int] | None:
    """A message body's "attachments" (the ids of files uploaded before): [] when absent, None when it is not a list
    of ids. Whether each id is the caller's to send is the engine's admission's decision."""
    if value is None:
        return []
    valid = isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) and 0 < item < 2**63 for item in value
    )
    return list(value) if valid else None

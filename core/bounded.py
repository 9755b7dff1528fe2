"""Reading YAML and JSON that users send without letting their depth crash a request: Python's parsers recurse once
per nesting level, so a document of a few KB made of brackets raised RecursionError (a 500) before."""

from __future__ import annotations

import json
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

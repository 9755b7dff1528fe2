"""`{name}` and `{name[key]}` interpolation of the variables earlier steps produced."""

from __future__ import annotations

import json
from typing import Any

from django.utils.translation import gettext as _

from agents.workflows.schema import KEY, REFERENCE


class InterpolationError(Exception):
    """A reference that names no variable or key; the message says which."""


def lookup(variables: dict[str, Any], name: str, keys: str = "") -> Any:
    """The value of `name` with its `[key]` parts applied (a numeric key indexes a list)."""
    if name not in variables:
        raise InterpolationError(_("There is no variable “%(name)s”.") % {"name": name})
    value = variables[name]
    for key in KEY.findall(keys):
        key = key.strip().strip("'\"")
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.lstrip("-").isdigit() and -len(value) <= int(key) < len(value):
            value = value[int(key)]
        else:
            raise InterpolationError(_("“%(name)s” has no key “%(key)s”.") % {"name": name, "key": key})
    return value


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def interpolate(value: Any, variables: dict[str, Any]) -> Any:
    """Fill references in `value` (strings, lists and mappings of them). A string that is exactly one reference
    becomes the variable itself (a list stays a list); references inside longer text become text."""
    if isinstance(value, dict):
        return {key: interpolate(item, variables) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, variables) for item in value]
    if not isinstance(value, str):
        return value
    whole = REFERENCE.fullmatch(value)
    if whole:
        return lookup(variables, whole.group(1), whole.group(2))
    return REFERENCE.sub(lambda match: as_text(lookup(variables, match.group(1), match.group(2))), value)

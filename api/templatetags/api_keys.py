"""`{{ key.scopes|scope_names }}`: a key's scopes by their short names in the active language (api.keys)."""

from __future__ import annotations

from collections.abc import Iterable

from django import template
from django.utils.translation import pgettext

from api.keys import scope_names as names

register = template.Library()


@register.filter
def scope_names(scopes: Iterable[str] | None) -> str:
    return pgettext("list separator", ", ").join(names(scopes or []))

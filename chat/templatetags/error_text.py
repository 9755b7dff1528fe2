"""`{{ text|error_text }}`: an error as a page shows it, its technical detail (in backticks, core.errortext) as
code."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from core.errortext import error_html

register = template.Library()


@register.filter(name="error_text")
def error_text(text: str, limit: int | None = None) -> SafeString:
    """`|error_text` or `|error_text:120` (a cell: at most 120 characters, the details left out when longer)."""
    return error_html(text, int(limit) if limit else None)

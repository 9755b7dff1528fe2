"""Filters for the chat page's text."""

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.filter
def code(value: object) -> SafeString:
    """The value (a tool's name, an identifier) as inline code, escaped: readers see it is not a word to translate."""
    return format_html("<code>{}</code>", value)

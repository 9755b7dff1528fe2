"""Markdown from models and documents, rendered safely: no HTML or script from a model ever runs in the page."""

from __future__ import annotations

import threading

import markdown as _markdown
import nh3
from django.utils.safestring import SafeString, mark_safe

# The HTML a rendered reply may contain; everything else (script, style, iframes, event handlers) is removed.
ALLOWED_TAGS = {
    "p", "br", "hr", "strong", "em", "b", "i", "del", "code", "pre", "blockquote",
    "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td", "a",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "th": {"align"}, "td": {"align"}}
ALLOWED_URL_SCHEMES = {"http", "https", "mailto"}


_local = threading.local()


def _converter() -> _markdown.Markdown:
    """This thread's converter: building one (extensions, patterns) costs more than converting a reply, and an
    instance must not be shared between threads."""
    converter = getattr(_local, "converter", None)
    if converter is None:
        converter = _local.converter = _markdown.Markdown(
            extensions=["fenced_code", "tables", "sane_lists"], output_format="html"
        )
    return converter


def render_markdown(text: str) -> SafeString:
    """Markdown to sanitised HTML: tags outside the allowed set (and script/style with their content) are removed,
    links keep only http(s)/mailto targets. Code spans and blocks show their text literally."""
    converter = _converter()
    try:
        html = converter.convert(text or "")
    finally:
        converter.reset()
    clean = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=ALLOWED_URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(clean)  # noqa: S308 - sanitised by nh3 just above

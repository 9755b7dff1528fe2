"""An error as people read it: a sentence in their language, then the technical words it came from (a library's
own English, an exception's name) set apart as code, so a Chinese page shows no English outside code.

The detail is written between backticks: the chat renders replies as Markdown (a code span), and pages that show
an error as text render it with `error_html` (templatetag `error_text`), which makes the same span a <code>.
"""

from __future__ import annotations

import re

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# Longest technical detail kept after the sentence: the rest goes to the logs.
DETAIL_MAX_CHARS = 300
_SPAN = re.compile(r"`([^`\n]+)`")


def with_detail(sentence: str, detail: str = "") -> str:
    """`sentence`, then `detail` (the technical words, in backticks) when there is one and the sentence does not
    already say it."""
    detail = " ".join(str(detail or "").replace("`", "'").split())[:DETAIL_MAX_CHARS]
    if not detail or detail in sentence:
        return sentence
    return f"{sentence} `{detail}`"


def error_html(text: str, limit: int | None = None) -> SafeString:
    """An error text as HTML: escaped, each backticked detail a <code> span. With `limit` (a table's cell), a text
    longer than that loses its details first (the whole is on the page it links to; identifiers stay), then is cut
    with "…"."""
    text = str(text or "")
    if limit is not None and len(text) > limit:
        text = " ".join(_SPAN.sub(lambda match: "" if " " in match.group(1) else match.group(0), text).split())
        if len(text) > limit:
            text = text[: limit - 1]
            if text.count("`") % 2:
                text = text[: text.rindex("`")]  # no half a detail
            text += "…"
    escaped = escape(text)
    return mark_safe(_SPAN.sub(lambda match: f"<code>{match.group(1)}</code>", escaped))  # noqa: S308 - escaped above

"""What of a server's tool list the platform keeps: bounds on the tools' number, names, descriptions and input
schemas (settings MCP_LIST_MAX_TOOLS, MCP_TOOL_*), and a report of each tool dropped or shortened and why, which the
admin shows as the server's last error.

A tool whose name or schema is out of bounds is dropped whole: its name is what the server is called with, and a
schema cut short would describe other arguments. A description out of bounds is shortened. Nothing that PostgreSQL
refuses (a NUL character, a name longer than its column) reaches the database.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from django.utils.translation import gettext_lazy as _

from core.conf import setting
from toolservers.client import ListedTool, Listing
from toolservers.models import ServerTool, function_name

# What an MCP tool name may be made of (the MCP specification's characters).
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]+")
# Tools named in the report per reason; the others are counted.
REPORT_NAMES = 10
# Characters of a name shown in the report.
REPORT_NAME_CHARS = 40


class Cut(StrEnum):
    """Why tools were dropped or shortened."""

    LIST_BYTES = "list_bytes"
    PAGES_LEFT = "pages_left"
    NAME_LENGTH = "name_length"
    NAME_CHARACTERS = "name_characters"
    DUPLICATE = "duplicate"
    SCHEMA_CHARACTERS = "schema_characters"
    SCHEMA_DEPTH = "schema_depth"
    SCHEMA_BYTES = "schema_bytes"
    NAME_TAKEN = "name_taken"
    TOO_MANY = "too_many"
    DESCRIPTION_CHARACTERS = "description_characters"
    DESCRIPTION_LENGTH = "description_length"


# The report's words, one a reason (%(limit)s: the bound; %(count)s: the tools; %(names)s: which).
WORDS = {
    Cut.LIST_BYTES: _(
        "The tool list was longer than %(limit)s bytes and was read no further; the tools read in full are kept "
        "(%(count)s)."
    ),
    Cut.PAGES_LEFT: _("The tool list had more than %(limit)s pages: the rest were not read."),
    Cut.NAME_LENGTH: _("%(count)s dropped, their names longer than %(limit)s characters: %(names)s."),
    Cut.NAME_CHARACTERS: _("%(count)s dropped, their names not only letters, digits, _, - and .: %(names)s."),
    Cut.DUPLICATE: _("%(count)s dropped, listed twice: %(names)s."),
    Cut.SCHEMA_CHARACTERS: _("%(count)s dropped, NUL characters in their input schemas: %(names)s."),
    Cut.SCHEMA_DEPTH: _("%(count)s dropped, their input schemas nested deeper than %(limit)s levels: %(names)s."),
    Cut.SCHEMA_BYTES: _("%(count)s dropped, their input schemas longer than %(limit)s bytes: %(names)s."),
    Cut.NAME_TAKEN: _(
        "%(count)s dropped, their names for models (64 characters at most) the same as another tool's: %(names)s."
    ),
    Cut.TOO_MANY: _("%(count)s dropped, beyond the %(limit)s tools a server may have: %(names)s."),
    Cut.DESCRIPTION_CHARACTERS: _("%(count)s kept with NUL characters removed from their descriptions: %(names)s."),
    Cut.DESCRIPTION_LENGTH: _("%(count)s kept with their descriptions shortened to %(limit)s characters: %(names)s."),
}


@dataclass(frozen=True)
class Bounds:
    """The bounds a listed tool is kept within (from the settings: `configured()`)."""

    max_tools: int
    name_chars: int
    description_chars: int
    schema_bytes: int
    schema_depth: int
    list_bytes: int = 0
    list_pages: int = 0

    @classmethod
    def configured(cls, *, list_pages: int) -> Bounds:
        return cls(
            max_tools=int(setting("MCP_LIST_MAX_TOOLS")),
            # Never longer than the column the name is stored in.
            name_chars=min(int(setting("MCP_TOOL_NAME_MAX_CHARS")), ServerTool._meta.get_field("name").max_length),
            description_chars=int(setting("MCP_TOOL_DESCRIPTION_MAX_CHARS")),
            schema_bytes=int(setting("MCP_TOOL_SCHEMA_MAX_BYTES")),
            schema_depth=int(setting("MCP_TOOL_SCHEMA_MAX_DEPTH")),
            list_bytes=int(setting("MCP_LIST_MAX_BYTES")),
            list_pages=list_pages,
        )

    def limit(self, cut: Cut) -> int:
        return {
            Cut.LIST_BYTES: self.list_bytes,
            Cut.PAGES_LEFT: self.list_pages,
            Cut.NAME_LENGTH: self.name_chars,
            Cut.SCHEMA_DEPTH: self.schema_depth,
            Cut.SCHEMA_BYTES: self.schema_bytes,
            Cut.TOO_MANY: self.max_tools,
            Cut.DESCRIPTION_LENGTH: self.description_chars,
        }.get(cut, 0)


@dataclass
class Screened:
    """The tools kept, and the names of those dropped or shortened by reason (in the order listed)."""

    kept: list[ListedTool] = field(default_factory=list)
    cuts: dict[Cut, list[str]] = field(default_factory=dict)

    def note(self, cut: Cut, name: str = "") -> None:
        self.cuts.setdefault(cut, []).append(name)

    def report(self, bounds: Bounds) -> str:
        """What was cut and why, in the active language ("" when nothing was)."""
        parts = []
        for cut in Cut:
            if not (names := self.cuts.get(cut)):
                continue
            shown = ", ".join(_shown(name) for name in names[:REPORT_NAMES])
            if len(names) > REPORT_NAMES:
                shown += ", …"
            count = len(self.kept) if cut == Cut.LIST_BYTES else len(names)
            parts.append(str(WORDS[cut]) % {"limit": bounds.limit(cut), "count": count, "names": shown})
        if not parts:
            return ""
        return " ".join([str(_("Not every listed tool was kept as the server listed it.")), *parts])


def _shown(name: str) -> str:
    """A tool's name for the report: its start, with what cannot be printed escaped."""
    start = name[:REPORT_NAME_CHARS]
    printable = "".join(char if char.isprintable() else repr(char)[1:-1] for char in start)
    return f"“{printable}{'…' if len(name) > REPORT_NAME_CHARS else ''}”"


def _schema_cut(schema: dict[str, Any], bounds: Bounds) -> Cut | None:
    """Why an input schema cannot be kept, or None. Walked without recursion: its depth is what is checked."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > bounds.schema_depth:
            return Cut.SCHEMA_DEPTH
        if isinstance(value, dict):
            if any("\x00" in key for key in value):
                return Cut.SCHEMA_CHARACTERS
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str) and "\x00" in value:
            return Cut.SCHEMA_CHARACTERS
    if len(json.dumps(schema, ensure_ascii=False).encode()) > bounds.schema_bytes:
        return Cut.SCHEMA_BYTES
    return None


def _dropped(tool: ListedTool, bounds: Bounds, seen: set[str]) -> Cut | None:
    """Why `tool` is dropped whole (its name or schema out of bounds, or listed twice), or None."""
    if len(tool.name) > bounds.name_chars:
        return Cut.NAME_LENGTH
    if not _TOOL_NAME.fullmatch(tool.name):
        return Cut.NAME_CHARACTERS
    if tool.name in seen:
        return Cut.DUPLICATE
    return _schema_cut(tool.input_schema, bounds)


def _description(tool: ListedTool, bounds: Bounds, screened: Screened) -> str:
    description = tool.description
    if "\x00" in description:
        description = description.replace("\x00", "")
        screened.note(Cut.DESCRIPTION_CHARACTERS, tool.name)
    if len(description) > bounds.description_chars:
        description = description[: max(0, bounds.description_chars - 1)] + "…"
        screened.note(Cut.DESCRIPTION_LENGTH, tool.name)
    return description


def screen(listing: Listing, *, slug: str, taken: set[str], bounds: Bounds) -> Screened:
    """The tools of `listing` kept within `bounds`, and what was cut. `taken`: the names for models of the tenant's
    other servers' tools (two tools may not share one)."""
    screened = Screened()
    if listing.cut_at_bytes is not None:
        screened.note(Cut.LIST_BYTES)
    if listing.pages_left:
        screened.note(Cut.PAGES_LEFT)
    seen: set[str] = set()
    names_for_models = set(taken)
    for tool in listing.tools:
        if (cut := _dropped(tool, bounds, seen)) is not None:
            screened.note(cut, tool.name)
            continue
        seen.add(tool.name)
        model_name = function_name(slug, tool.name)
        if model_name in names_for_models:
            screened.note(Cut.NAME_TAKEN, tool.name)
            continue
        if len(screened.kept) >= bounds.max_tools:
            screened.note(Cut.TOO_MANY, tool.name)
            continue
        names_for_models.add(model_name)
        kept = ListedTool(tool.name, _description(tool, bounds, screened), tool.input_schema)
        screened.kept.append(kept)
    return screened

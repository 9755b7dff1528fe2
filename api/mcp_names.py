"""The MCP tool names of a tenant's agents: readable, stable, and what MCP clients and the models behind them accept.

A name is made from the agent's API name (its slug, kept when the agent is renamed): an ASCII slug as it is, a
Chinese one (any non-ASCII one) transliterated (`光伏测算` → `guang-fu-ce-suan`, anyascii), at most 64 characters
of `A-Z a-z 0-9 _ -` (what Claude's and OpenAI's tool names allow; MCP's own bound is 128). Two agents whose names
would be the same: the older one (the smaller id) keeps it, the other gets `-<id>` after it, so an agent made later
never renames an earlier one. Names clients may have stored stay callable: `agent_<id>` (the earlier name of an agent
with a Chinese API name), the agent's ASCII slug as it is (a longer one was its name before the 64-character bound),
and `<name>-<id>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from anyascii import anyascii

TOOL_NAME_MAX_CHARS = 64
_ASCII_SLUG = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]+")
_LEGACY = re.compile(r"^agent_(\d+)$")


def transliterated(slug: str) -> str:
    """The slug in ASCII: its ASCII characters as they are, a character of its own syllable (Chinese, Japanese,
    Korean: anyascii writes it capitalised) as a word of its own in lower case, others (é, ж) by their letters."""
    pieces = []
    for char in slug:
        if char.isascii():
            pieces.append(char)
            continue
        text = anyascii(char)
        syllable = text[:1].isupper() and not char.isupper()
        pieces.append(f"-{text.lower()}-" if syllable else text)
    return _NOT_NAME.sub("-", "".join(pieces)).strip("-")


def _cut(name: str, limit: int) -> str:
    return name[:limit].rstrip("-_") or "agent"


def tool_names(agents: Iterable[tuple[int, str]]) -> dict[int, str]:
    """Each agent's tool name by id, from (id, slug) of every agent of one tenant (published or not, so that
    publishing one renames no other)."""
    names: dict[int, str] = {}
    taken: set[str] = set()
    for pk, slug in sorted(agents):
        name = _cut(transliterated(slug), TOOL_NAME_MAX_CHARS)
        legacy = _LEGACY.match(name)
        if name in taken or (legacy and int(legacy.group(1)) != pk):
            suffix = f"-{pk}"
            name = _cut(name, TOOL_NAME_MAX_CHARS - len(suffix)) + suffix
        names[pk] = name
        taken.add(name)
    return names


def aliases(pk: int, slug: str, name: str) -> set[str]:
    """The other names that still call the agent: `agent_<id>`, its ASCII slug whole, its name with `-<id>`."""
    suffix = f"-{pk}"
    also = {f"agent_{pk}", _cut(name.removesuffix(suffix), TOOL_NAME_MAX_CHARS - len(suffix)) + suffix}
    if _ASCII_SLUG.match(slug):
        also.add(slug)
    return also - {name}

"""The tool interface. The platform, not the SDK, runs tools (seed 0, A4): the runtime validates the model's
arguments against `parameters`, calls `run`, stores the result paired with the call, and passes `context` on."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jsonschema
from django.utils.translation import get_language

if TYPE_CHECKING:
    from tenants.models import Tenant


class ToolError(Exception):
    """A tool could not do what was asked; the message goes back to the model as the tool's result."""


@dataclass
class ToolCallContext:
    """What a tool run may know about where it runs. `context` is the tool context of the turn (A5): what earlier
    tools (and plan steps) returned in their ToolResult.context, passed on without going through the prompt."""

    tenant: Tenant
    user_id: int | None = None
    agent_id: int | None = None
    conversation_id: int | None = None
    context: dict[str, Any] = field(default_factory=dict)
    # The knowledge bases the running agent version has attached (None: not known to the caller).
    knowledge_base_ids: tuple[int, ...] | None = None


@dataclass
class ToolResult:
    """A tool's answer: `content` goes back to the model (a str as is, anything else as JSON); `context` is merged
    into the turn's tool context for later tools; `ask_user` (a question) pauses the turn to ask the user."""

    content: Any
    context: dict[str, Any] = field(default_factory=dict)
    ask_user: str | None = None

    def content_text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return json.dumps(self.content, ensure_ascii=False, default=str)


class Tool:
    """Base of every tool. Subclasses set `name` (the identifier the model calls), the display label and the
    descriptions in both languages, and `parameters` (a JSON schema object); a pack's tool sets `pack`
    (tenants.packs) and exists only for the tenants that have the pack enabled. Pages show the label, never the name."""

    name: str = ""
    pack: str = ""
    label_en: str = ""
    label_zh: str = ""
    description_en: str = ""
    description_zh: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    # Where a tenant's own tool comes from (an MCP server's name): pages group such tools under it.
    group: str = ""

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        """Do the work with validated `arguments`; raise ToolError with a message the model can act on."""
        raise NotImplementedError

    def description(self, language: str | None = None) -> str:
        """The description in `language` (zh-hans or en; default: the active language), falling back to the other."""
        return _in_language(language, self.description_en, self.description_zh)

    def label(self, language: str | None = None) -> str:
        """The name people read (progress lines, the agent form) in `language` (default: the active language),
        falling back to the other language, then to the identifier."""
        return _in_language(language, self.label_en, self.label_zh) or self.name

    def openai_schema(self, language: str | None = None) -> dict[str, Any]:
        """The function-calling declaration sent to the model."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description(language), "parameters": self.parameters},
        }

    def validation_errors(self, arguments: Any) -> list[str]:
        """What is wrong with `arguments` against `parameters` (empty when they are valid), worded for the model."""
        validator = jsonschema.Draft202012Validator(self.parameters)
        errors = []
        for error in sorted(validator.iter_errors(arguments), key=lambda e: list(e.path)):
            where = "/".join(str(part) for part in error.path) or "arguments"
            errors.append(f"{where}: {error.message}")
        return errors


def _in_language(language: str | None, english: str, chinese: str) -> str:
    """`chinese` for a zh language, else `english`; each falls back to the other when empty."""
    language = (language or get_language() or "en").lower()
    if language.startswith("zh"):
        return chinese or english
    return english or chinese

"""The API's own words in its OpenAPI schema, in the request's language (drf-spectacular builds the schema per
request under the active language; `?lang=zh-hans` or `?lang=en` picks one). The tags keep their names (they are the
URL segments, and code generators name classes after them); Swagger UI and ReDoc show each one's description."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _


def gettext_noop(message: str) -> str:
    """Marks `message` for the catalogue (makemessages knows this name) without Django's gettext_noop, which reads
    the settings: config.settings imports this module, so reading them here would configure Django from the settings
    module while it is half-imported (every setting after this import missing, DATABASES empty)."""
    return message


TITLE = gettext_noop("Agent platform API")
DESCRIPTION = gettext_noop(
    "Agents and conversations of one tenant. Authenticate with a tenant API key: `Authorization: Bearer ak-…` "
    "(the tenant's API keys page)."
)
TAGS = {
    "agents": gettext_noop("Agents: create, change, publish, export and import them."),
    "attachments": gettext_noop("Files for conversations: upload one, read what was stored, fetch its bytes."),
    "conversations": gettext_noop("Conversations: start one, send a message and read the reply, stop a turn."),
    "eval-cases": gettext_noop("Evaluation cases: read, change or delete one."),
    "eval-compare": gettext_noop(
        "Two evaluation runs of one dataset compared: pass rates, fixed, broken and same cases."
    ),
    "eval-datasets": gettext_noop("Evaluation datasets: their cases, import and export."),
    "eval-runs": gettext_noop(
        "Evaluation runs: start one against a version, follow its progress, stop it, read its results."
    ),
    "feedback": gettext_noop("Ratings of replies: make an evaluation case of a 👎."),
    "knowledge-bases": gettext_noop("Knowledge bases: their documents, ingestion and search."),
    "plans": gettext_noop("Plans the planner made: their steps, their logs, stopping one."),
    "usage": gettext_noop("Token usage of the tenant's model calls."),
    "workflows": gettext_noop("Workflows: validate a document, read one and its runs."),
}


def translate_schema(result: dict[str, Any], generator: Any, request: Any = None, public: bool = True) -> dict:
    """Postprocessing hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]): the title, the description and a
    description for each tag the operations use, in the active language."""
    info = result.setdefault("info", {})
    info["title"] = _(TITLE)
    info["description"] = _(DESCRIPTION)
    used = sorted({tag for item in result.get("paths", {}).values() for operation in item.values()
                   if isinstance(operation, dict) for tag in operation.get("tags", [])})  # fmt: skip
    result["tags"] = [{"name": tag, "description": _(TAGS[tag])} if tag in TAGS else {"name": tag} for tag in used]
    return result

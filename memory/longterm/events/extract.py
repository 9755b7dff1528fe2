"""Extraction by the model: the JSON schema and prompts of an answer, its validation and the one repair.

The model answers JSON (EXTRACTION_SCHEMA); the answer is validated against the schema, an invalid one is sent back
once with the errors (one repair), and a second invalid answer is skipped (memory.longterm.extraction counts it).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema

from llm.messages import ChatMessage
from memory.longterm.events.walk import events_walk
from memory.longterm.strength import Owner
from memory.models import Event, RelationKind

EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["new_events"],
    "properties": {
        "new_events": {
            "type": "array",
            "maxItems": 8,
            "items": {
                "type": "object",
                "required": ["event_id", "actor", "action_type", "content_summary"],
                "properties": {
                    "event_id": {"type": "string", "minLength": 1, "maxLength": 60},
                    "actor": {"enum": ["user", "assistant", "system"]},
                    "action_type": {"type": "string", "minLength": 1, "maxLength": 40},
                    "content_summary": {"type": "string", "minLength": 1, "maxLength": 600},
                    "entities": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1, "maxLength": 200},
                                "type": {"type": "string", "maxLength": 40},
                            },
                        },
                    },
                    "status": {"enum": ["pending", "completed", "failed"]},
                    "related_event_ids": {"type": "array", "items": {"type": "string"}},
                    "supersedes": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "relations": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["source", "type", "target"],
                "properties": {
                    "source": {"type": "string"},
                    "type": {"enum": [kind.value for kind in RelationKind]},
                    "target": {"type": "string"},
                },
            },
        },
    },
}

_EVENT_FORM = """\
"new_events": [{"event_id": "n1", "actor": "user|assistant|system", "action_type": "query|answer|report|\
clarify|decision|execute_tool|plan|other", "content_summary": "one short sentence in the conversation's \
language", "entities": [{"name": "...", "type": "ORG|PERSON|PLACE|PRODUCT|ORDER|DATE|OTHER"}], "status": \
"pending|completed|failed", "supersedes": ["<id of a known event this one contradicts or replaces>"]}],
 "relations": [{"source": "<id>", "type": "causes|follows|refers_to|resolves", "target": "<id>"}]}"""

_EVENT_RULES = """\
Ids of new events are yours ("n1", "n2"...); known events keep their ids. "A causes B" when A is a reason for B \
(a closed port causes a delay; a delay causes a late order). "A resolves B" when A settles B."""

EXTRACTION_PROMPT = f"""\
You maintain the event graph of a user's long-term memory (seed: event knowledge graph). From the new exchange, \
extract the events worth remembering: facts reported, requests, decisions, outcomes. Skip greetings and small talk. \
Answer with one JSON object only, no prose, of this form:
{{{_EVENT_FORM}
{_EVENT_RULES} Use {{"new_events": []}} when nothing is worth remembering.
你负责维护用户长期记忆的事件图谱：从新的对话中提取值得记住的事件，只输出一个 JSON 对象。"""

# Seed 2's combined answer: the reply and the exchange's events in one model call. The runner streams only
# `user_reply` to the person (agents.replyjson); the extraction validates the rest (one repair, else skipped).
COMBINED_PROMPT = f"""\
Long-term memory: answer every message with one JSON object only, no prose around it, `user_reply` first:
{{"user_reply": "<your reply to the user, as you would write it, in the user's language>", {_EVENT_FORM}
`new_events` are the events of this exchange worth remembering (facts reported, requests, decisions, outcomes; \
none for small talk: []). Known events are listed among the recalled memories, with their ids in brackets.
{_EVENT_RULES}
长期记忆：每次只输出一个 JSON 对象，先写 user_reply（给用户的回复），再写本轮值得记住的事件 new_events。"""


class ExtractionInvalid(ValueError):
    """A model's extraction answer that is not JSON or does not match the schema."""


def parse_extraction(text: str) -> dict[str, Any]:
    """The extraction JSON in a model's answer (a ```json fence or prose around it is tolerated), validated."""
    text = (text or "").strip()
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
    if fenced:
        text = fenced.group(1)
    elif not text.startswith("{"):
        start, end = text.find("{"), text.rfind("}")
        if start >= 0 and end > start:
            text = text[start : end + 1]
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ExtractionInvalid(f"not JSON: {exc}") from None
    errors = sorted(jsonschema.Draft202012Validator(EXTRACTION_SCHEMA).iter_errors(data), key=lambda e: e.path)
    if errors:
        first = errors[0]
        where = "/".join(str(part) for part in first.absolute_path) or "(top)"
        raise ExtractionInvalid(f"{where}: {first.message}")
    return data


@dataclass(frozen=True)
class Extraction:
    """What one extraction produced: the validated JSON (None: skipped) and whether it took the one repair."""

    data: dict[str, Any] | None
    repaired: bool = False
    error: str = ""


def known_events_text(owner: Owner, query: str, limit: int = 8) -> str:
    """The events an extraction may link to: the ones most related to the new exchange, then the newest."""
    walked = events_walk(owner, query, top_k=limit, depth=1, limit=limit)
    events = walked.events or list(
        Event.objects.filter(user_id=owner.user_id, key=owner.key).order_by("-timestamp", "-id")[:limit]
    )
    if not events:
        return "(none yet)"
    return "\n".join(
        f"{event.event_id}: [{event.actor}/{event.action_type}] {event.content_summary}" for event in events
    )


def extract_with_model(
    *,
    complete: Callable[[list[ChatMessage]], str],
    known: str,
    exchange: str,
    now: dt.datetime,
    first_answer: str | None = None,
) -> Extraction:
    """Ask the model for the exchange's events (`complete(messages) -> text`), validate, repair once, else skip.
    With `first_answer` (seed 2's combined answer, which came with the reply) that answer is the first try: a valid
    one costs no call, an invalid one gets the one repair call."""
    messages = [
        ChatMessage.system(EXTRACTION_PROMPT),
        ChatMessage.user(
            f"Now: {now.isoformat(timespec='seconds')}\nKnown events:\n{known}\n\nNew exchange:\n{exchange}"
        ),
    ]
    answer = complete(messages) if first_answer is None else first_answer
    try:
        return Extraction(parse_extraction(answer))
    except ExtractionInvalid as exc:
        first_error = str(exc)
    messages += [
        ChatMessage.assistant(answer),
        ChatMessage.user(
            f"That answer is invalid ({first_error}). Reply again with the JSON object only, matching "
            "the form given. 上面的回答无效，请只输出符合格式的 JSON 对象。"
        ),
    ]
    try:
        return Extraction(parse_extraction(complete(messages)), repaired=True)
    except ExtractionInvalid as exc:
        return Extraction(None, repaired=True, error=str(exc))

"""What the reply sees of the event graph: the walked events placed in the system message within a token budget.

The events are taken best first (the walk's fused order) while they fit; an event whose summary repeats one already
taken (the same normalised text, or contained in it) is left out; events linked by `follows` (neighbouring turns
of one conversation) are merged into one passage that names its day once; the passages are ordered by time, the
events inside a passage too. One line per passage:

    2023-05-08 [evt_…] user/report: … | [evt_…] assistant/answer: … {causes → evt_…}

Event ids stay (a combined answer relates new events to them); `causes` and `resolves` are written out, `follows`
is what a passage is and `refers_to` (a shared name) is left out; superseded and pending events are marked.
"""

from __future__ import annotations

from django.utils import timezone

from llm.tokens import count_text
from memory.longterm import store
from memory.longterm.events.when import DATE_TYPE
from memory.models import Event, EventStatus, RelationKind

SHOWN_RELATIONS = (RelationKind.CAUSES, RelationKind.RESOLVES)
LINE_COST = 2  # tokens a line costs beyond its text (what memory.longterm.recall counts)


def _passages(events: list[Event], neighbours: set[tuple[int, int]]) -> list[list[Event]]:
    """`events` grouped into runs of neighbours (each run in time order), the runs in time order."""
    ordered = sorted(events, key=lambda event: (event.timestamp, event.pk))
    runs: list[list[Event]] = []
    for event in ordered:
        joined = next((run for run in runs if any((event.pk, other.pk) in neighbours for other in run)), None)
        if joined is None:
            runs.append([event])
        else:
            joined.append(event)
    return runs


def _event_text(event: Event, links: list[str]) -> str:
    text = f"[{event.event_id}] {event.actor}/{event.action_type}: {event.content_summary}"
    if event.status != EventStatus.COMPLETED:
        text += f" ({event.status})"
    if event.superseded_by_id:
        text += f" (superseded by {event.superseded_by.event_id if event.superseded_by else '?'})"
    about = [entity["name"] for entity in event.entities or [] if entity.get("type") == DATE_TYPE]
    if about:
        text += f" (about {', '.join(about)})"
    if links:
        text += " {" + "; ".join(links) + "}"
    return text


def _render(run: list[Event], outgoing: dict[int, list[str]]) -> str:
    day = timezone.localtime(run[0].timestamp).strftime("%Y-%m-%d")
    return f"{day} " + " | ".join(_event_text(event, outgoing.get(event.pk, [])) for event in run)


def _repeats(summary: str, seen: list[str]) -> bool:
    """Whether a normalised summary says nothing the taken ones do not (equal, or inside a longer one)."""
    return any(summary == other or (len(summary) >= 20 and summary in other) for other in seen)


def timeline(walked, *, budget_tokens: int, model: str = "gpt-4") -> tuple[list[str], list[Event]]:
    """The walked events as passages (see the module) within `budget_tokens`, best first while they fit. Returns
    the lines (oldest first) and the events they show (in the same order)."""
    ids = {event.pk: event.event_id for event in walked.events}
    outgoing: dict[int, list[str]] = {}
    neighbours: set[tuple[int, int]] = set()
    for relation in walked.relations:
        if relation.kind == RelationKind.FOLLOWS:
            neighbours |= {(relation.source_id, relation.target_id), (relation.target_id, relation.source_id)}
        elif relation.kind in SHOWN_RELATIONS:
            outgoing.setdefault(relation.source_id, []).append(f"{relation.kind} → {ids.get(relation.target_id, '?')}")
    taken: list[Event] = []
    seen: list[str] = []
    lines: list[str] = []
    costs: dict[str, int] = {}  # a passage's tokens, counted once (most passages stay as they were from one try on)
    rendered: dict[tuple[int, ...], str] = {}  # a passage's line, by its events (rendered once, as its cost)

    def cost(line: str) -> int:
        if line not in costs:
            costs[line] = count_text(line, model) + LINE_COST
        return costs[line]

    def render(run: list[Event]) -> str:
        key = tuple(event.pk for event in run)
        if key not in rendered:
            rendered[key] = _render(run, outgoing)
        return rendered[key]

    for event in walked.events:
        summary = store.normalise(event.content_summary)
        if _repeats(summary, seen):
            continue
        trial = [render(run) for run in _passages([*taken, event], neighbours)]
        if sum(cost(line) for line in trial) > budget_tokens:
            continue
        taken.append(event)
        seen.append(summary)
        lines = trial
    shown = [event for run in _passages(taken, neighbours) for event in run]
    return lines, shown
